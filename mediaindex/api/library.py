"""The start page's library: one page of indexed files with their counts, the index's size, example queries.

Example queries come from what the index holds, so they always find something: a few words said in
some files, and what the classifier saw in others.
"""

from __future__ import annotations

import re

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import SearchFilters

EXAMPLE_FILES = 8  # files looked at for examples, spread over the library
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_WORDS = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)


def kind_counts(store, video_id: str) -> dict[str, int]:  # store: mediaindex.index.store.VectorStore
    """Segments of one file per kind (speech, ocr, visual, …), kinds without any left out."""
    from mediaindex.segments import MODALITIES

    counts = {m: store.count(SearchFilters(video_id=video_id, modality=m)) for m in MODALITIES}
    return {m: n for m, n in counts.items() if n}


def _phrase(text: str, most: int = 5) -> str | None:
    """A few words from the start of a sentence: enough to find it, short enough to read as a query."""
    for sentence in _SENTENCE.split(text):
        words = _WORDS.findall(sentence)
        cjk = any(ord(c) > 0x2E80 for c in sentence)  # CJK text has no spaces to count words by
        if len(words) >= 3 or (words and cjk):
            return " ".join(words[:most])
    return None


def _visual(text: str) -> str | None:
    """'a photo of a sulphur-crested cockatoo, a bird, a parrot' -> 'sulphur-crested cockatoo'."""
    first = text.split(",")[0].strip()
    first = re.sub(r"^(a photo of|a picture of)\s+", "", first, flags=re.I)
    first = re.sub(r"^(a|an|the)\s+", "", first, flags=re.I)
    return first or None


_examples: dict[tuple, list[str]] = {}  # one entry: the examples of the library as it was last seen


def example_queries(store, records: list[VideoRecord], most: int = 4) -> list[str]:
    """Up to `most` queries taken from the index: speech first, then what was seen.

    Reading a file's transcript costs a scroll over its segments: the answer is kept until the library changes."""
    if not records:
        return []
    key = (id(store), len(records), max(r.indexed_at for r in records), most)
    if key not in _examples:
        _examples.clear()
        _examples[key] = _draw_examples(store, records, most)
    return list(_examples[key])


def _draw_examples(store, records: list[VideoRecord], most: int) -> list[str]:
    step = max(1, len(records) // EXAMPLE_FILES)
    spoken: list[str] = []
    seen: list[str] = []
    for record in records[::step][:EXAMPLE_FILES]:
        for payload in store.segments_of(record.video_id, "speech"):
            phrase = _phrase(payload.get("text") or "")
            if phrase:
                spoken.append(phrase)
                break
        else:
            for payload in store.segments_of(record.video_id, "visual")[:1]:
                label = _visual(payload.get("text") or "")
                if label:
                    seen.append(label)
    out: list[str] = []
    for query in spoken + seen:
        if query.casefold() not in {q.casefold() for q in out}:
            out.append(query)
    return out[:most]
