"""A place in the text embedder's space for a picture the classifier has no words for.

The bundled classifier knows ImageNet's 1,000 classes; on most shots of real video it is too unsure of any of
them for a label (`classifier.LABEL_MIN`), and such a picture had no place in the text space: a query in words
could not rank it at all. After ConSE (Norouzi et al., "Zero-Shot Learning by Convex Combination of Semantic
Embeddings", 2014), it is placed by the text embeddings of its most probable class names ("a photo of a maze",
"a photo of a stone wall", ...), weighted by their probabilities: among the things it looks most like.

A plain weighted mean of several names lies nearer the centre of all names than any one name does, and once
normalised it resembles every query a little (with multilingual-e5, whose vectors share a large common part,
such places outranked the labelled shots for any query). The place is therefore the centre of the class names
plus the weighted direction of its classes from that centre, at the distance one name lies from it on average.

Such a place ranks the picture for a query and is judged among the query's other shots (`search.features`). A
labelled picture keeps the embedding of its label text, and a text–image model, where one is configured,
remains the better evidence (`models.clip`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mediaindex.models.classifier import class_description
from mediaindex.models.imagenet_labels import LABELS
from mediaindex.models.passage_cache import embedded_once

if TYPE_CHECKING:
    from mediaindex.models.text_embed import TextEmbedder
    from mediaindex.segments import Segment


class LabelSpace:
    """Places pictures among the class names' embeddings (all 1,000 embedded once, on the first picture, and
    kept under `cache_dir` when one is given)."""

    def __init__(self, embedder: TextEmbedder, cache_dir: Path | None = None) -> None:
        self.embedder = embedder
        self.cache_dir = cache_dir

    @cached_property
    def _names(self) -> tuple[np.ndarray, np.ndarray, float]:
        """The centre of the class names, each name's offset from it, and a name's mean distance from it."""
        names = class_name_vectors(self.embedder, self.cache_dir)
        centre = names.mean(axis=0)
        offsets = names - centre
        return centre, offsets, float(np.linalg.norm(offsets, axis=1).mean())

    def places(self, pictures: Sequence[Sequence[Sequence[float]]]) -> np.ndarray:
        """One unit vector per picture from its [class index, probability] pairs. ValueError for pairs that
        are not class probabilities."""
        parsed = [_parse(classes) for classes in pictures]
        out = np.zeros((len(parsed), self.embedder.dim), np.float32)
        if not parsed:
            return out
        centre, offsets, distance = self._names
        for i, (ks, ps) in enumerate(parsed):
            direction = (ps[:, None] * offsets[ks]).sum(axis=0)
            length = float(np.linalg.norm(direction))
            place = centre + (distance / length) * direction if length > 0 else centre
            out[i] = place / np.linalg.norm(place)
        return out


def class_name_vectors(embedder: TextEmbedder, cache_dir: Path | None = None) -> np.ndarray:
    """The embedding of each class name ("a photo of a macaw"), normalised, in `LABELS` order; embedded once and
    kept under `cache_dir`."""
    return embedded_once(embedder, [class_description(n) for n in LABELS], cache_dir, "class-names")


def _parse(classes: Sequence[Sequence[float]]) -> tuple[list[int], np.ndarray]:
    try:
        ks = [int(k) for k, _ in classes]
        ps = np.asarray([float(p) for _, p in classes], dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a picture's class probabilities: {classes!r}") from exc
    if (not ks or any(not 0 <= k < len(LABELS) for k in ks) or not np.isfinite(ps).all() or (ps < 0).any()
            or ps.sum() <= 0):
        raise ValueError(f"not a picture's class probabilities: {classes!r}")
    return ks, ps


def segment_vectors(embedder: TextEmbedder, segments: Sequence[Segment], space: LabelSpace | None = None) -> np.ndarray:
    """The text vector of each segment: the embedding of its text, or, for a picture with classes and no text,
    its place among the class names (`LabelSpace`)."""
    pictures = [i for i, s in enumerate(segments) if not s.text.strip() and s.class_probabilities]
    if not pictures:
        return np.asarray(embedder.embed_passages([s.text for s in segments]), dtype=np.float32)
    vectors = np.zeros((len(segments), embedder.dim), np.float32)
    placed = set(pictures)
    texts = [i for i in range(len(segments)) if i not in placed]
    if texts:
        vectors[texts] = embedder.embed_passages([segments[i].text for i in texts])
    vectors[pictures] = (space or LabelSpace(embedder)).places([segments[i].class_probabilities for i in pictures])
    return vectors
