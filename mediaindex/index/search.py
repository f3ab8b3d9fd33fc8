"""Search: dense meaning + sparse exact words (+ image vectors), fused in the engine, returned as moments.

Ranking: Qdrant's reciprocal-rank fusion of the candidate lists. The exact-word list counts only as
much as the query's words are actually found: a German or Korean query over English speech shares a
stray word with it at most, and such a chance match must not outrank the meaning.

Shown scores (0..1) are calibrated, not rank artefacts: the best of the hit's text similarity mapped
from the embedder's "unrelated" band to its "same meaning" band, the share of the query's words the
segment holds, and its image similarity; capped by the score above it so that the list stays sorted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np

from mediaindex.config import IndexSettings
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.index.moments import diversify, merge_moments
from mediaindex.index.store import SPARSE_VECTOR, TEXT_VECTOR, Retriever, ScoredHit
from mediaindex.models.text_embed import TextEmbedder
from mediaindex.segments import Hit

Mode = Literal["hybrid", "dense", "sparse"]
MODES = ("hybrid", "dense", "sparse")
MAX_QUERY_CHARS = 2000
MAX_LIMIT = 1000
# Below this share of its words found in any candidate, the exact-word list gets no say.
MIN_WORD_COVERAGE = 0.34


def _check(query: str | None, limit: int, filters: SearchFilters | None, mode: str) -> str:
    if query is not None and not isinstance(query, str):
        raise ValueError(f"the search query must be text, got {type(query).__name__}")
    query = " ".join((query or "").replace("\x00", " ").split())
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the search query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are allowed")
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer):
        raise ValueError(f"limit must be a whole number, got {limit!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if filters is not None and not isinstance(filters, SearchFilters):
        raise ValueError(f"filters must be SearchFilters, got {type(filters).__name__}")
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return query


def word_coverage(query_words: set[int], words: set[int]) -> float:
    return len(query_words & words) / len(query_words) if query_words else 0.0


def search(
    index: MediaIndex,
    embedder: TextEmbedder | None,
    query: str | None,
    limit: int = 10,
    filters: SearchFilters | None = None,
    *,
    mode: Mode = "hybrid",
    image_vectors: dict[str, np.ndarray] | None = None,
    moments: bool = True,
) -> list[Hit]:
    """Best moments first (or segments, with moments=False).

    `image_vectors` (e.g. {"image": clip_vector} for a query image) search those named vectors too,
    alone or fused with the text query.
    """
    query = _check(query, limit, filters, mode)
    images = {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in (image_vectors or {}).items()}
    if not query and not images:
        raise ValueError("the search query is empty")
    for name, vec in images.items():
        if name not in index.store.dims or name == TEXT_VECTOR:
            raise ValueError(f"this index has no {name!r} image vectors (configure the model that makes them and ingest)")
        if vec.shape[0] != index.store.dims[name] or not np.isfinite(vec).all() or not vec.any():
            raise ValueError(f"the {name!r} query vector must be {index.store.dims[name]} finite numbers, not all zero")
    cfg = index.settings
    pool = max(cfg.candidates, limit * 5)
    hits = _retrieve(index, embedder, query, images, filters, mode, pool)
    if moments:
        hits = diversify(merge_moments(hits, cfg.merge_gap, cfg.max_moment), cfg.per_video_decay)
    return hits[:limit]


def _retrieve(
    index: MediaIndex, embedder: TextEmbedder | None, query: str, images: dict[str, np.ndarray],
    filters: SearchFilters | None, mode: str, pool: int,
) -> list[Hit]:
    cfg, store = index.settings, index.store
    words = index.sparse.query(query) if query and mode != "dense" else None
    query_words = set(words.indices) if words else set()
    wanted = [SPARSE_VECTOR, *images]
    if mode == "sparse":
        if not words:
            return []
        found = store.query([Retriever(SPARSE_VECTOR, words)], pool, filters, with_vectors=wanted)
        return _shown(found, cfg, query_words, {}, images)

    retrievers: list[Retriever] = []
    dense_query: dict[str, np.ndarray] = dict(images)
    if query:
        if embedder is None:
            raise ValueError("a text query needs the text embedder")
        dense_query[TEXT_VECTOR] = np.asarray(embedder.embed_query(query), dtype=np.float32)
        retrievers.append(Retriever(TEXT_VECTOR, dense_query[TEXT_VECTOR], cfg.dense_weight))
        wanted.append(TEXT_VECTOR)
    retrievers += [Retriever(name, vec, cfg.image_weight) for name, vec in images.items()]
    if words and mode == "hybrid" and cfg.sparse_weight > 0:
        probe = store.query([Retriever(SPARSE_VECTOR, words)], pool, filters, with_vectors=[SPARSE_VECTOR])
        coverage = max((word_coverage(query_words, s.words) for s in probe), default=0.0)
        if coverage >= MIN_WORD_COVERAGE:
            retrievers.append(Retriever(SPARSE_VECTOR, words, cfg.sparse_weight * coverage))
    if mode == "dense":
        query_words = set()
    retrievers = [r for r in retrievers if r.weight > 0] or retrievers[:1]
    found = store.query(retrievers, pool, filters, candidates=pool, rrf_k=cfg.rrf_k, with_vectors=wanted)
    return _shown(found, cfg, query_words, dense_query, images)


def _shown(
    found: list[ScoredHit], cfg: IndexSettings, query_words: set[int], dense_query: dict[str, np.ndarray],
    images: dict[str, np.ndarray],
) -> list[Hit]:
    """Engine order, calibrated scores (each at most the one above it)."""
    out: list[Hit] = []
    cap = 1.0
    for s in found:
        parts = [word_coverage(query_words, s.words)]
        for name, q in dense_query.items():
            v = s.dense.get(name)
            if v is None or not v.any():
                continue
            cos = float(np.dot(q, v) / (np.linalg.norm(q) * np.linalg.norm(v)))
            parts.append(_calibrate(cos, cfg.dense_floor, cfg.dense_ceiling) if name == TEXT_VECTOR
                         else float(np.clip(cos, 0.0, 1.0)))
        cap = min(cap, max(parts))
        out.append(replace(s.hit, score=round(cap, 6)))
    return out


def _calibrate(score: float, floor: float, ceiling: float) -> float:
    return float(np.clip((score - floor) / (ceiling - floor), 0.0, 1.0))
