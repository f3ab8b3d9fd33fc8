"""Citations: moments written as `[VIDEO_ID@START-END]` (seconds), checked against the index.

A citation is real only if its video is in the index, its range lies within the video's duration, and it
overlaps at least one indexed segment of that video's media (speech, on-screen text, visual concepts; not a
generated summary or chapter). Anything else is rejected with a reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mediaindex.agents.schema import Citation, RejectedCitation
from mediaindex.agents.tools import SHOWN_AS, Archive
from mediaindex.segments import MEDIA_MODALITIES, Hit

_CITE = re.compile(r"\[\s*([A-Za-z0-9_-]{1,64})\s*@\s*(-?\d+(?:\.\d+)?)\s*(?:-|–|to)\s*(-?\d+(?:\.\d+)?)\s*s?\s*\]")
DURATION_SLACK = 0.5  # seconds: container durations and segment ends differ by a few frames


@dataclass(frozen=True)
class CitationRef:
    video_id: str
    start: float
    end: float


def cite(video_id: str, start: float, end: float) -> str:
    return f"[{video_id}@{start:.1f}-{end:.1f}]"


def parse_citations(text: str) -> list[CitationRef]:
    seen: dict[tuple[str, float, float], CitationRef] = {}
    for vid, a, b in _CITE.findall(text):
        ref = CitationRef(vid, float(a), float(b))
        seen.setdefault((ref.video_id, ref.start, ref.end), ref)
    return list(seen.values())


def strip_citations(text: str) -> str:
    return re.sub(r"\s+", " ", _CITE.sub("", text)).strip()


def without_video_ids(text: str, video_ids: set[str]) -> str:
    """The answer's prose without the internal ids it copied from the moments' labels ("said in a.mp4, video
    66ea5dae, 70.5-73.7 s" reads "said in a.mp4, 70.5-73.7 s"); its citations keep theirs."""
    for vid in sorted(video_ids, key=len, reverse=True):
        text = re.sub(rf"(?:\s*,)?\s*\bvideo(?:\s+ID)?:?\s+{re.escape(vid)}\b(?!\s*@)", "", text, flags=re.IGNORECASE)
    return text


def from_hit(hit: Hit) -> Citation:
    return Citation(video_id=hit.video_id, start=round(hit.start, 2), end=round(hit.end, 2), modality=hit.modality,
                    text=hit.text, source=hit.source)


def moment_text(hits: list[Hit]) -> str:
    """What a moment holds, as it reads: what was said first, then what is on screen, then what the picture shows,
    each but speech named as such ("… · seen: a photo of a T-shirt"), so that no label reads as said."""
    parts = []
    for modality in MEDIA_MODALITIES:
        texts = dict.fromkeys(h.text.strip() for h in hits if h.modality == modality and h.text.strip())
        if texts:
            said = " ".join(texts)
            parts.append(said if modality == "speech" else f"{SHOWN_AS.get(modality, modality)}: {said}")
    return " · ".join(parts)


def check(archive: Archive, refs: list[CitationRef]) -> tuple[list[Citation], list[RejectedCitation]]:
    valid: list[Citation] = []
    rejected: list[RejectedCitation] = []

    def reject(ref: CitationRef, reason: str) -> None:
        rejected.append(RejectedCitation(video_id=ref.video_id, start=ref.start, end=ref.end, reason=reason))

    for ref in refs:
        record = archive.video(ref.video_id)
        if record is None:
            reject(ref, "no such video in the index")
            continue
        if ref.start < 0 or ref.end <= ref.start:
            reject(ref, "empty or negative time range")
            continue
        if record.duration is not None and ref.end > record.duration + DURATION_SLACK:
            reject(ref, f"ends after the video ({record.duration:.1f} s)")
            continue
        overlapping = [h for h in archive.segments(ref.video_id)
                       if h.start < ref.end and h.end > ref.start and h.modality in MEDIA_MODALITIES]
        if not overlapping:
            reject(ref, "no indexed moment in this range")
            continue
        overlapping.sort(key=lambda h: (MEDIA_MODALITIES.index(h.modality), h.start))
        valid.append(Citation(video_id=ref.video_id, start=ref.start, end=ref.end, modality=overlapping[0].modality,
                              text=moment_text(overlapping)[:500], source=record.source))
    return valid, rejected


def check_citations(archive: Archive, citations: list[Citation]) -> list[RejectedCitation]:
    """Re-check structured citations (e.g. a stored summary's) against the index; returns the failures."""
    _, rejected = check(archive, [CitationRef(c.video_id, c.start, c.end) for c in citations])
    return rejected
