"""From segment hits to moments: merge neighbouring hits of one file, then keep any file from flooding.

Only hits that matched reach here (the searcher drops the rest first), so a moment spans the matched
sentences and no more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mediaindex.search.relevance import band_order
from mediaindex.segments import Hit

# A neighbouring hit widens a moment only when it matches nearly as well as the moment's best hit;
# weaker neighbours (every sentence of a file is some candidate) are absorbed without stretching it,
# so sentence-sized hits do not grow back into paragraphs.
STRETCH_RATIO = 0.85


def merge_moments(hits: list[Hit], gap: float, max_len: float) -> list[Hit]:
    """Hits of the same file within `gap` seconds of each other become one moment (at most `max_len` long), in
    the same chapter where the file marks chapters: a moment does not straddle two, and says the one it lies in.

    A moment keeps its best hit's score, band, snippet, modality and thumbnail (or the first thumbnail
    any of its hits has), spans the union of the time ranges of the hits that match about as well and
    starts playing at the earliest matched word of those.
    """
    moments: dict[str, list[Hit]] = {}
    for hit in sorted(hits, key=lambda h: -h.score):
        mine = moments.setdefault(hit.video_id, [])
        for i, m in enumerate(mine):
            start, end = min(m.start, hit.start), max(m.end, hit.end)
            if (hit.start <= m.end + gap and hit.end >= m.start - gap and end - start <= max_len
                    and hit.in_chapter == m.in_chapter):
                # A weaker hit of another modality (e.g. on-screen text lasting the whole video) is
                # absorbed but does not stretch the moment away from what was actually matched.
                if hit.modality == m.modality and hit.score >= STRETCH_RATIO * m.score:
                    seeks = [t for t in (m.seek, hit.seek) if t is not None]
                    mine[i] = replace(m, start=start, end=end, thumbnail=m.thumbnail or hit.thumbnail,
                                      seek=min(seeks) if seeks else None)
                break
        else:
            mine.append(replace(hit))
    return sorted((m for ms in moments.values() for m in ms), key=lambda h: -h.score)


def diversify(moments: list[Hit], decay: float) -> list[Hit]:
    """Best first: by band, and within a band by score, the n-th best moment of a file counting decay**n as
    much, so other files get a turn near the top. Only the order is discounted: each moment keeps its own
    score, which is its confidence and agrees with its band."""
    seen: dict[str, int] = {}
    ranked: list[tuple[int, float, Hit]] = []
    for m in sorted(moments, key=lambda h: -h.score):
        n = seen.get(m.video_id, 0)
        seen[m.video_id] = n + 1
        # Band by band: a file's second "high" moment still comes before any "medium" one.
        ranked.append((band_order(m.band), -m.score * decay**n, m))
    return [m for *_, m in sorted(ranked, key=lambda r: (r[0], r[1]))]


@dataclass
class FileMoments:
    """One file's matching moments: the best first, `count` of them in all (`moments` holds the first few)."""

    video_id: str
    source: str
    score: float
    band: str | None
    count: int
    moments: list[Hit]

    def to_dict(self) -> dict[str, Any]:
        return {"video_id": self.video_id, "source": self.source, "score": self.score, "band": self.band,
                "count": self.count, "moments": [m.to_dict() for m in self.moments]}


def by_file(moments: list[Hit], per_file: int) -> list[FileMoments]:
    """Moments grouped by file: files in the order of their best moment (band, then score), each with its
    `per_file` best moments (by score) and how many it has in all."""
    files: dict[str, list[Hit]] = {}
    for m in moments:
        files.setdefault(m.video_id, []).append(m)
    grouped = []
    for ms in files.values():
        ms = sorted(ms, key=lambda h: (band_order(h.band), -h.score))
        grouped.append(FileMoments(ms[0].video_id, ms[0].source, ms[0].score, ms[0].band, len(ms), ms[:per_file]))
    return sorted(grouped, key=lambda f: (band_order(f.band), -f.score))
