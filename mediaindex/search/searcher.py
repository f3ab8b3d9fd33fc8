"""The one searcher: rank, then decide. The CLI, the API and the agents all search through `Searcher`.

Ranking (`ranking`): the engine's hybrid candidates (dense meaning, exact words, pictures), nothing dropped.
Deciding (`relevance`): one fitted model gives each candidate P(relevant) from a handful of features
(`features`); that probability is the hit's score and its band. Shots, labelled or pictures without words
placed among their likely classes, are judged among the query's shots by the model's shot part (a labelled shot
keeps the higher of its two probabilities: its words may match the query's). The reader chooses how sure a hit
must be (`min_confidence`: high, medium, low or none); a query about something the archive does not hold returns
nothing because no candidate is likely enough, not because of a rule about that query. Hits are listed
most probable first, the engine's fused order breaking ties (over the sample media's queries, held out by
file, this kept the fused order's top 5 and raised its rank 1 more than listing band by band in fused order).

A search by picture alone has no fitted model: its shots carry their picture similarity (cosine of the
query's and the shot's "frame" vectors) as score, without a band, and below PICTURE_MATCH a shot is returned
only to a reader who asks for every ranked moment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from mediaindex.config import default_cache_dir
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.index.store import ScoredHit
from mediaindex.models.imagenet_labels import LABELS
from mediaindex.search import relevance
from mediaindex.search.features import features, picture_features, pictured, shot_features, shots
from mediaindex.search.moments import FileMoments, by_file, diversify, merge_moments
from mediaindex.search.ranking import (
    MAX_QUERY_CHARS,
    Query,
    QueryError,
    candidates,
    check_query,
    judgeable,
    measure_background,
    measure_shots,
    prepare,
)
from mediaindex.segments import Hit

if TYPE_CHECKING:
    from mediaindex.config import VisionSettings
    from mediaindex.models.clip import ClipEmbedder
    from mediaindex.models.text_embed import TextEmbedder

__all__ = ["FILE_DEPTH", "MAX_LIMIT", "MAX_PER_FILE", "MAX_QUERY_CHARS", "MODES", "Judged", "QueryError", "Searcher",
           "check_query", "judged", "search"]

Mode = Literal["hybrid", "dense", "sparse"]
MODES = ("hybrid", "dense", "sparse")
MAX_LIMIT = 1000
# Searching by file: how many moments deep the files are gathered, and how many of each file's are listed at most.
FILE_DEPTH = 100
MAX_PER_FILE = 20
# Picture similarity where a shot starts to look like the query picture, measured over ../shared/media's
# images and shots (no relevance model is fitted for picture queries).
PICTURE_MATCH = 0.5864


def _check(query: str | None, limit: int, filters: SearchFilters | None, mode: str) -> str:
    query = check_query(query)
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer):
        raise QueryError(f"limit must be a whole number, got {limit!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if filters is not None and not isinstance(filters, SearchFilters):
        raise QueryError(f"filters must be SearchFilters, got {type(filters).__name__}")
    if mode not in MODES:
        raise QueryError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return query


@dataclass
class Judged:
    """A candidate segment, its features (`features.NAMES`) and the probability that it is relevant."""

    hit: Hit
    features: np.ndarray
    probability: float
    fused_rank: int  # its place in the engine's fused list, from 0
    fused_score: float = 0.0  # the engine's fused (reciprocal-rank) score
    seek: float | None = None


def _first_matched_word(s: ScoredHit, q: Query) -> float | None:
    """Where playing a speech hit should begin: its first word that is one of the query's words."""
    if (s.hit.modality != "speech" or q.encoder is None or not s.spoken or not q.word_ids
            or not (s.words & q.word_ids)):
        return None
    for start, _end, word in s.spoken:
        if set(q.encoder.query(str(word)).indices) & q.word_ids:
            return float(start)
    return None


def judged(
    index: MediaIndex, embedder: TextEmbedder | None, query: str | None, limit: int = 10,
    filters: SearchFilters | None = None, *, mode: Mode = "hybrid",
    image_vectors: dict[str, np.ndarray] | None = None, clip_query: Callable[[str], np.ndarray] | None = None,
    picture_model: relevance.RelevanceModel | None = None,
) -> list[Judged]:
    """Every candidate with its features and probability, most probable first (ties in the engine's fused order;
    a picture alone: most similar first); nothing dropped. `picture_model` judges the shots met through
    `clip_query` (their probability is the higher of its and the relevance model's)."""
    query = _check(query, limit, filters, mode)
    filters = index.spelled(filters)  # once: the candidates are asked for up to twice with them
    clip_text = clip_query(query) if clip_query is not None and query else None
    q = prepare(index, embedder, query, mode, image_vectors, clip_text)
    pool = index.settings.candidates  # the pool the model was fitted on: its distributions are this pool's
    found = candidates(index, q, filters, mode, pool)
    reference = len(found)
    if limit * 5 > pool and reference >= pool:
        # More hits asked for than the pool yields: look deeper, and judge what is added by the pool's yardstick.
        known = {_key(s) for s in found}
        found += [s for s in candidates(index, q, filters, mode, limit * 5) if _key(s) not in known]
    yardstick: list[ScoredHit] = []
    if query and filters is not None and not filters.is_empty():
        # The model was fitted on the query's pool over the whole index: a filter narrows what is listed, not
        # how a moment is judged, so a moment has the same probability in a narrowed search.
        yardstick = candidates(index, q, None, mode, pool)
        reference = len(yardstick)
        found = yardstick + found
    if reference < pool:
        measure_background(q, embedder, default_cache_dir())
    rows = features(q, found, pool, reference)
    if query:
        name = embedder.name if embedder else None
        probabilities = relevance.load_model(embedder=name).probability(rows)
        probabilities[[not judgeable(s) for s in found]] = 0.0  # the text part reads candidates with words
        shot_model = relevance.load_shot_model(embedder=name)
        if shot_model is not None and (seen := shots(found)).any():
            measure_shots(q, embedder, default_cache_dir())
            by_shot = shot_model.probability(shot_features(q, found, reference))
            probabilities[seen] = np.maximum(probabilities[seen], by_shot[seen])
        if picture_model is not None and q.clip_text is not None and (met := pictured(found)).any():
            by_picture = picture_model.probability(picture_features(q, found, reference))
            probabilities[met] = np.maximum(probabilities[met], by_picture[met])
    else:  # a picture alone: no fitted model, the picture similarity
        probabilities = np.array([max((_cosine(v, s.dense[n]) for n, v in q.images.items() if n in s.dense),
                                      default=0.0) for s in found])
    listed = len(yardstick)  # the yardstick's own candidates judge; the filtered ones after it are listed
    out = [Judged(_with_looks(s), rows[i], float(probabilities[i]), i - listed, float(s.hit.score),
                  _first_matched_word(s, q)) for i, s in enumerate(found) if i >= listed]
    # The fused score breaks ties of probability (shots the model cannot tell apart keep the ranking's order).
    return sorted(out, key=lambda j: (-j.probability, -j.fused_score))


def _key(s: ScoredHit) -> tuple[str, float, float, str, str]:
    """A segment, by what it is (the engine's point ids are not carried)."""
    return (s.hit.video_id, s.hit.start, s.hit.end, s.hit.modality, s.hit.text)


LOOKS_LIKE = 3  # how many of a picture's likeliest classes a hit names


def _with_looks(s: ScoredHit) -> Hit:
    """The hit, naming what a picture without words looks like (its likeliest classes, which placed it)."""
    if s.hit.text or not s.classes:
        return s.hit
    ks = [pair[0] for pair in s.classes[:LOOKS_LIKE] if isinstance(pair, list | tuple) and pair]
    names = [LABELS[int(k)] for k in ks if isinstance(k, int | float) and 0 <= int(k) < len(LABELS)]
    return replace(s.hit, looks_like=names)  # a damaged payload names nothing rather than failing the search


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def search(
    index: MediaIndex,
    embedder: TextEmbedder | None,
    query: str | None,
    limit: int = 10,
    filters: SearchFilters | None = None,
    *,
    mode: Mode = "hybrid",
    image_vectors: dict[str, np.ndarray] | None = None,
    clip_query: Callable[[str], np.ndarray] | None = None,
    picture_model: relevance.RelevanceModel | None = None,
    moments: bool = True,
    min_confidence: str | None = None,
    leave_out: Callable[[Hit], bool] | None = None,
) -> list[Hit]:
    """The moments (or segments, with moments=False) at least as probably relevant as `min_confidence` asks
    (default "low"), best first; [] when none is. Segments `leave_out` names are dropped before moments form.

    `image_vectors` (e.g. {"frame": feature} of a query picture) search those named vectors too, alone
    or fused with the text query; `clip_query` puts text through a CLIP text tower, searched against the
    shots' "image" vectors, and `picture_model` judges the shots it meets.
    """
    level = relevance.check_level(min_confidence)
    found = judged(index, embedder, query, limit, filters, mode=mode, image_vectors=image_vectors,
                   clip_query=clip_query, picture_model=picture_model)
    text = bool((query or "").strip())
    kept = [j for j in found if _passes(j, text, level) and not (leave_out is not None and leave_out(j.hit))]
    hits = [replace(j.hit, score=round(j.probability, 6), band=relevance.band(j.probability) if text else None,
                    seek=j.seek) for j in kept]
    if not moments:
        return hits[:limit]
    cfg = index.settings
    return diversify(merge_moments(hits, cfg.merge_gap, cfg.max_moment), cfg.per_video_decay)[:limit]


def _passes(j: Judged, text: bool, level: str) -> bool:
    if text:
        return relevance.passes(j.probability, level)
    return level == "none" or j.probability >= PICTURE_MATCH  # a picture alone: its similarity line


class Searcher:
    """Search one index: by text (with CLIP's text tower when `vision.clip` is configured) and by picture."""

    def __init__(self, index: MediaIndex, embedder: TextEmbedder | None, vision: VisionSettings | None = None) -> None:
        self.index = index
        self.embedder = embedder
        self.vision = vision

    def _clip(self) -> ClipEmbedder | None:
        if self.vision is None or "image" not in self.index.store.dims:
            return None
        from mediaindex.models.vision import load_clip

        return load_clip(self.vision)

    def text(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
             mode: Mode = "hybrid", moments: bool = True, min_confidence: str | None = None) -> list[Hit]:
        query = _check(query, limit, filters, mode)
        relevance.check_level(min_confidence)
        if not query:
            raise QueryError("the search query is empty")
        clip = self._clip() if mode != "sparse" and _visual_allowed(filters) else None
        pictures = (relevance.load_picture_model(self.vision.clip_relevance)
                    if clip is not None and self.vision is not None and self.vision.clip_relevance else None)
        return search(self.index, self.embedder, query, limit, filters, mode=mode,
                      clip_query=clip.embed_query if clip is not None else None, picture_model=pictures,
                      moments=moments, min_confidence=min_confidence)

    def files(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
              mode: Mode = "hybrid", min_confidence: str | None = None, per_file: int = 3) -> list[FileMoments]:
        """The files that hold a match, best first, each with its `per_file` best moments and how many it has:
        the moments of a search FILE_DEPTH moments deep, grouped (a hit's probability does not depend on depth)."""
        if isinstance(per_file, bool) or not isinstance(per_file, int) or not 1 <= per_file <= MAX_PER_FILE:
            raise QueryError(f"per_file must be a whole number from 1 to {MAX_PER_FILE}, got {per_file!r}")
        query = _check(query, limit, filters, mode)
        found = self.text(query, max(FILE_DEPTH, limit), filters, mode=mode, min_confidence=min_confidence)
        return by_file(found, per_file)[:limit]

    def image(self, picture: np.ndarray, limit: int = 10, filters: SearchFilters | None = None,
              min_confidence: str | None = None, leave_out: Callable[[Hit], bool] | None = None) -> list[Hit]:
        """Shots that look like `picture`: through the classifier's "frame" vector and, when configured,
        CLIP's "image" vector; `min_confidence` "none" lists them below PICTURE_MATCH too, `leave_out` drops
        shots (e.g. the picture's own)."""
        from mediaindex.models.images import check_image
        from mediaindex.models.vision import load_classifier

        if self.vision is None:
            raise QueryError("image search needs the vision settings")
        picture = check_image(picture, "the query picture")
        if not _visual_allowed(filters):
            raise QueryError(f"image search finds visual segments only, not {filters.modality!r} ones")  # type: ignore[union-attr]
        classifier = load_classifier(self.vision) if "frame" in self.index.store.dims else None
        clip = self._clip()
        if classifier is None and clip is None:
            raise QueryError("image search needs vision.classifier or vision.clip to be configured (and an index "
                             "built with them)")
        vectors: dict[str, np.ndarray] = {}
        if classifier is not None:
            vectors["frame"] = classifier.features([picture])[0]
        if clip is not None:
            vectors["image"] = clip.embed_images([picture])[0]
        where = replace(filters or SearchFilters(), modality="visual")
        return search(self.index, None, None, limit, where, image_vectors=vectors, min_confidence=min_confidence,
                      leave_out=leave_out)


def _visual_allowed(filters: SearchFilters | None) -> bool:
    mods = filters.modalities if filters is not None else None
    return mods is None or "visual" in mods
