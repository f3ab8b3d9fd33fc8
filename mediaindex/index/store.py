"""Vector stores behind one small interface: Qdrant in-process (qdrant-edge) or a Qdrant server.

Every point is one segment with named vectors: the dense "text" embedding, a sparse "words" vector
(BM25 term frequencies, weighted by IDF inside the engine) and optional extra dense vectors such as
"image" or "frame". Both stores build the same engine-side queries: nearest neighbours on one vector,
or several candidate lists fused by Qdrant's reciprocal-rank fusion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

from mediaindex.index.filters import SearchFilters
from mediaindex.segments import CLASSES_FIELD, IN_CHAPTER_FIELD, TRACK_FIELD, Hit, Segment

__all__ = ["PAYLOAD_INDEXES", "SPARSE_VECTOR", "TEXT_VECTOR", "Retriever", "SearchFilters", "SparseVec",
           "VectorStore", "hit_from_payload"]

TEXT_VECTOR = "text"
SPARSE_VECTOR = "words"
# Payload fields that filters use; each gets an index in the engine ("source" also for prefixes).
PAYLOAD_INDEXES = {"video_id": "keyword", "source": "keyword", "modality": "keyword", "language": "keyword",
                   "speaker": "keyword", "start": "float", "end": "float"}
# Payload fields a hit needs; the rest (e.g. "extra") stays in the engine.
HIT_FIELDS = ["source", "video_id", "start", "end", "modality", "text", "language", "thumbnail", "speaker",
              "confidence", "extra.words", f"extra.{CLASSES_FIELD}", f"extra.{TRACK_FIELD}", f"extra.{IN_CHAPTER_FIELD}"]


@dataclass(frozen=True)
class SparseVec:
    indices: list[int]
    values: list[float]

    def __bool__(self) -> bool:
        return bool(self.indices)


@dataclass(frozen=True)
class Retriever:
    """One candidate list of a query: a dense or sparse vector against one named vector of the points."""

    using: str
    vector: np.ndarray | SparseVec
    weight: float = 1.0


@dataclass
class ScoredHit:
    """A hit with its point's vectors when asked for: the words it holds, its dense vectors."""

    hit: Hit
    words: set[int] = field(default_factory=set)
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    confidence: float | None = None  # the segment's own: a visual label's probability, OCR's, speech's
    spoken: list[list] = field(default_factory=list)  # speech: [start, end, word] of each word
    classes: list[list] = field(default_factory=list)  # a picture without words: [class index, probability], ...


def scored_hit(payload: dict[str, Any] | None, score: float, vectors: Any) -> ScoredHit:
    """Both engines return named vectors as a dict; sparse ones have `indices`."""
    words: set[int] = set()
    dense: dict[str, np.ndarray] = {}
    for name, vec in (vectors or {}).items() if isinstance(vectors, dict) else ():
        if name == SPARSE_VECTOR:
            words = set(vec.indices)
        elif vec is not None:
            dense[name] = np.asarray(vec, dtype=np.float32)
    payload = payload or {}
    extra = payload.get("extra") or {}
    conf = payload.get("confidence")
    return ScoredHit(hit_from_payload(payload, score), words, dense,
                     float(conf) if isinstance(conf, int | float) else None,
                     list(extra.get("words") or []) if isinstance(extra, dict) else [],
                     list(extra.get(CLASSES_FIELD) or []) if isinstance(extra, dict) else [])


def check_retrievers(retrievers: list[Retriever], dims: dict[str, int]) -> None:
    """Refuse a query that names no vector or a vector this index does not hold (both stores)."""
    if not retrievers:
        raise ValueError("a query needs at least one vector")
    for r in retrievers:
        if r.using != SPARSE_VECTOR and r.using not in dims:
            raise ValueError(f"this index has no {r.using!r} vectors (it has {', '.join(dims)})")


class VectorStore(Protocol):
    """`dims` names every dense vector of a point: "text" always, others (e.g. "image") when configured."""

    dims: dict[str, int]

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None: ...

    def delete_video(self, video_id: str) -> None: ...

    def set_source(self, video_id: str, source: str) -> None:
        """Every point of the video names this path (the file was moved)."""

    def set_metadata(self, video_id: str, values: dict[str, Any]) -> None:
        """Every point of the video has these keys of its `extra` set to these values (its other keys kept)."""
        ...

    def delete_other_videos(self, keep: list[str]) -> None:
        """Delete every point whose video is not in `keep` (leftovers of writes that did not finish)."""
        ...

    def search(
        self, vector: np.ndarray, limit: int, filters: SearchFilters | None = None, using: str = TEXT_VECTOR
    ) -> list[Hit]:
        """Nearest neighbours on one dense vector: a one-retriever `query` (shared by both stores)."""
        return [s.hit for s in self.query([Retriever(using, vector)], limit, filters)]

    def query(
        self, retrievers: list[Retriever], limit: int, filters: SearchFilters | None = None,
        candidates: int = 100, rrf_k: int = 60, with_vectors: list[str] | None = None,
    ) -> list[ScoredHit]: ...

    def count(self, filters: SearchFilters | None = None) -> int: ...

    def segments_of(self, video_id: str, modality: str | None = None) -> list[dict[str, Any]]: ...

    def optimize(self) -> bool: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


_PAYLOAD_FIELDS = [f.name for f in fields(Segment) if f.name != "vectors"]


def point_payload(seg: Segment) -> dict[str, Any]:
    """Segment.payload() without dataclasses.asdict's deep copies (a third of the upsert time)."""
    return {name: getattr(seg, name) for name in _PAYLOAD_FIELDS}


def word_text(seg: Segment) -> str:
    """What a segment is found by as exact words: its text and its `aliases` (e.g. a visual label's
    kinds in other languages), which are neither shown nor embedded."""
    aliases = seg.extra.get("aliases") or []
    return " ".join([seg.text, *map(str, aliases)]) if aliases else seg.text


def hit_from_payload(payload: dict[str, Any], score: float) -> Hit:
    return Hit(
        source=payload["source"],
        video_id=payload["video_id"],
        start=float(payload["start"]),
        end=float(payload["end"]),
        score=float(score),
        modality=payload["modality"],
        text=payload.get("text") or "",
        language=payload.get("language"),
        thumbnail=payload.get("thumbnail"),
        speaker=payload.get("speaker"),
        track=(payload.get("extra") or {}).get(TRACK_FIELD),
        in_chapter=(payload.get("extra") or {}).get(IN_CHAPTER_FIELD),
    )


def check_vectors(segments: list[Segment], vectors: np.ndarray, dims: dict[str, int]) -> np.ndarray:
    """Refuse a batch whose vectors do not fit the index, before anything is written."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(segments) or vectors.shape[1] != dims[TEXT_VECTOR]:
        raise ValueError(f"expected {len(segments)} text vectors of {dims[TEXT_VECTOR]} dimensions, "
                         f"got an array of shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        raise ValueError("text vectors contain NaN or infinite values")
    for seg in segments:
        for name, vec in seg.vectors.items():
            if name in dims and len(vec) != dims[name]:
                raise ValueError(f"segment vector {name!r} has {len(vec)} dimensions, the index expects {dims[name]}")
    return vectors


def batches(n: int, size: int = 256) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def payloads_in_time_order(next_page: Callable[[Any], tuple[list[Any], Any]]) -> list[dict[str, Any]]:
    """Scroll every page (`next_page(offset) -> (records, next offset)`) and sort the payloads by time."""
    payloads: list[dict[str, Any]] = []
    offset = None
    while True:
        records, offset = next_page(offset)
        payloads.extend(dict(r.payload or {}) for r in records)
        if offset is None or not records:
            break
    return sorted(payloads, key=lambda p: (float(p.get("start", 0.0)), float(p.get("end", 0.0))))
