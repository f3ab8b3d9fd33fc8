"""Ranking: a query's candidates from the index, in the order the engine fuses them; nothing is dropped here.

Hybrid retrieval: the query's dense vector against the segments' text vectors (speech, on-screen text, the
visual labels' text, summaries), its words against their sparse vectors, and a query picture (or CLIP's text
tower) against the shots' picture vectors; Qdrant fuses the lists by reciprocal rank. Which of the
candidates match is decided afterwards, by one model (`relevance`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mediaindex.errors import NOT_UTF8_TEXT, is_utf8
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.index.store import SPARSE_VECTOR, TEXT_VECTOR, Retriever, ScoredHit, SparseVec
from mediaindex.models.label_space import class_name_vectors
from mediaindex.models.passage_cache import embedded_once
from mediaindex.models.text_language import query_language
from mediaindex.search.wordweights import WordWeights
from mediaindex.segments import WEB_ADDRESS_PARTS

if TYPE_CHECKING:
    from mediaindex.index.sparse import SparseEncoder
    from mediaindex.models.text_embed import TextEmbedder

CLIP_VECTOR = "image"  # models.vision's IMAGE_VECTOR: a shot in a CLIP space, met by text through its text tower
IMAGE_VECTORS = ("frame", CLIP_VECTOR)  # and models.vision's FRAME_VECTOR
MAX_QUERY_CHARS = 2000
# Visual segments read "a photo of a macaw, a bird, ...": the template's words are no evidence.
TEMPLATE = "a photo of"


class QueryError(ValueError):
    """A query that cannot be searched; the message says why, for a person."""


def check_query(query: str | None) -> str:
    """The query with blanks folded; refuses what cannot be searched."""
    if query is not None and not isinstance(query, str):
        raise QueryError(f"the search query must be text, got {type(query).__name__}")
    query = " ".join((query or "").replace("\x00", " ").split())
    if not is_utf8(query):
        raise QueryError(f"the search query {NOT_UTF8_TEXT}")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the search query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are allowed")
    if query and not any(unicodedata.category(c)[0] in "LN" for c in query):
        raise QueryError("the search query has no letters or digits to search for (emoji and punctuation alone "
                         "match nothing): describe what to find in words")
    return query


@dataclass
class Query:
    """A query as ranking and the relevance model need it: its text, words, dense vector and pictures."""

    text: str
    words: SparseVec | None = None
    word_ids: set[int] = field(default_factory=set)
    template_ids: set[int] = field(default_factory=set)
    weights: WordWeights = field(default_factory=WordWeights)  # what finding each word says
    dense: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)
    clip_text: np.ndarray | None = None
    language: str | None = None  # the query's language where its letters or words say it plainly
    background: np.ndarray | None = None  # its dense similarity to each passage of `background.txt`
    nameable: float | None = None  # its dense similarity to the nearest name of a class the classifier sees
    word_vectors: np.ndarray | None = None  # its words embedded one by one (rows normalised), where shots are judged
    encoder: SparseEncoder | None = None  # tells which spoken word is which query word


def prepare(
    index: MediaIndex, embedder: TextEmbedder | None, query: str, mode: str,
    image_vectors: dict[str, np.ndarray] | None = None, clip_text: np.ndarray | None = None,
) -> Query:
    """The query's words, dense vector and pictures, checked against what the index holds."""
    images = {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in (image_vectors or {}).items()}
    if not query and not images:
        raise QueryError("the search query is empty")
    for name, vec in images.items():
        if name not in index.store.dims or name == TEXT_VECTOR:
            raise QueryError(f"this index has no {name!r} image vectors (configure the model that makes them and "
                             "ingest)")
        if vec.shape[0] != index.store.dims[name] or not np.isfinite(vec).all() or not vec.any():
            raise QueryError(f"the {name!r} query vector must be {index.store.dims[name]} finite numbers, not all zero")
    q = Query(query, images=images, encoder=index.sparse, language=query_language(query) if query else None)
    if query and mode != "dense":  # meaning alone: the query's words are no evidence either
        words = index.sparse.query(query)  # retrieves by CJK runs' pairs of characters too
        q.word_ids = set(index.sparse.query(query, pairs=False).indices)
        q.template_ids = set(index.sparse.query(TEMPLATE).indices) - q.word_ids
        q.weights = WordWeights.of(query, index.sparse)
        q.words = words or None
    if query and mode != "sparse" and embedder is None:
        raise QueryError("a text query needs the text embedder")
    if query and embedder is not None:  # words alone still retrieve by words only; the relevance model judges
        q.dense = np.asarray(embedder.embed_query(query), dtype=np.float32)  # every candidate on the same features
    if clip_text is not None and "image" in index.store.dims and mode != "sparse":
        q.clip_text = np.asarray(clip_text, dtype=np.float32).reshape(-1)
    return q


BACKGROUND_FILE = Path(__file__).with_name("background.txt")
_BACKGROUND: dict[str, np.ndarray] = {}


def background_vectors(embedder: TextEmbedder, cache_dir: Path | None = None) -> np.ndarray:
    """The background passages embedded by this embedder, normalised: once per process, and kept under
    `cache_dir` (embedding them takes a second or two, a one-shot search should not pay it each time)."""
    if embedder.name in _BACKGROUND:
        return _BACKGROUND[embedder.name]
    lines = BACKGROUND_FILE.read_text(encoding="utf-8").splitlines()
    vectors = embedded_once(embedder, [line for line in lines if line.strip() and not line.startswith("#")],
                            cache_dir, "background")
    _BACKGROUND[embedder.name] = vectors
    return vectors


def measure_background(q: Query, embedder: TextEmbedder | None, cache_dir: Path | None = None) -> None:
    """Note the query's similarity to each background passage (only needed where candidates are few)."""
    if q.dense is not None and embedder is not None and q.background is None:
        unit = q.dense / max(float(np.linalg.norm(q.dense)), 1e-12)
        q.background = background_vectors(embedder, cache_dir) @ unit


_NAMES: dict[str, np.ndarray] = {}


def measure_shots(q: Query, embedder: TextEmbedder | None, cache_dir: Path | None = None) -> None:
    """What the shot part reads of the query beyond its vector (only needed where shots are judged): how nearly it
    names a class the classifier sees, and its words, each embedded alone."""
    if q.dense is None or embedder is None:
        return
    if q.nameable is None:
        if embedder.name not in _NAMES:
            _NAMES[embedder.name] = class_name_vectors(embedder, cache_dir)
        unit = q.dense / max(float(np.linalg.norm(q.dense)), 1e-12)
        q.nameable = float((_NAMES[embedder.name] @ unit).max())
    if q.word_vectors is None:
        words = query_words(q.text)
        if words == [q.text]:  # a one-word query is its own word: its vector is at hand
            vectors = q.dense[None, :]
        else:
            vectors = embedder.embed_queries(words) if words else np.zeros((0, len(q.dense)), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        q.word_vectors = vectors / np.where(norms > 0, norms, 1.0)


# A bound on the cost of embedding a long query word by word; descriptions people type are far shorter.
MAX_QUERY_WORDS = 32
_QUERY_WORD = re.compile(r"[^\W_]+")


def query_words(text: str) -> list[str]:
    """The query's distinct words (runs of letters and digits), in order, at most MAX_QUERY_WORDS."""
    return list(dict.fromkeys(_QUERY_WORD.findall(text)))[:MAX_QUERY_WORDS]


def judgeable(s: ScoredHit) -> bool:
    """Whether the text part of the relevance model judges a candidate, among the query's candidates with words
    (its distribution of similarities is theirs). Shots are judged again among the query's shots, their labels and
    pictures without words alike (`features.shot_features`), and a shot met through a CLIP model by that model's
    picture model where one is fitted (`relevance.load_picture_model`)."""
    return bool(s.hit.text)


def candidates(index: MediaIndex, q: Query, filters: SearchFilters | None, mode: str, pool: int) -> list[ScoredHit]:
    """The engine's fused candidate list for a prepared query, best fused rank first: for a text query, `pool`
    candidates with words and the pictures without words (`judgeable`) ranked among them."""
    cfg, store = index.settings, index.store
    wanted = [SPARSE_VECTOR, TEXT_VECTOR, *(n for n in IMAGE_VECTORS if n in store.dims)]
    retrievers: list[Retriever] = []
    if mode != "sparse":
        if q.dense is not None:
            retrievers.append(Retriever(TEXT_VECTOR, q.dense, cfg.dense_weight))
        retrievers += [Retriever(name, vec, cfg.image_weight) for name, vec in q.images.items()]
        if q.clip_text is not None:
            retrievers.append(Retriever(CLIP_VECTOR, q.clip_text, cfg.image_weight))
    if q.words and mode != "dense":
        retrievers.append(Retriever(SPARSE_VECTOR, q.words, cfg.sparse_weight))
    if not retrievers:
        return []
    retrievers = [r for r in retrievers if r.weight > 0] or retrievers[:1]
    found = store.query(retrievers, pool, filters, candidates=pool, rrf_k=cfg.rrf_k, with_vectors=wanted)
    placed = sum(not judgeable(s) for s in found)
    if q.text and placed and len(found) == pool:
        # Pictures without words took places in the pool: as many more are asked for, so that the candidates
        # with words, and their distribution, stay the pool's.
        more = pool + placed
        found = store.query(retrievers, more, filters, candidates=more, rrf_k=cfg.rrf_k, with_vectors=wanted)
    return found


def address_part_ids(encoder: SparseEncoder) -> set[int]:
    """The word ids of what every web address has (www, http(s), the domains)."""
    return set(encoder.query(" ".join(WEB_ADDRESS_PARTS)).indices)


_LETTERS = re.compile(r"[\W_]+")


def letters(text: str) -> str:
    """Lower-case letters and digits only: OCR drops and adds spaces and punctuation at will."""
    return _LETTERS.sub("", unicodedata.normalize("NFKC", text).casefold())
