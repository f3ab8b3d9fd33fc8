"""Search by picture ("find shots like this frame") and by text through a CLIP text tower.

Each query vector is searched through its own named vector in the store; when more than one list
comes back they are merged by reciprocal rank, since cosine scores of different spaces do not compare.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mediaindex.config import VisionSettings
from mediaindex.errors import MediaIndexError
from mediaindex.index.index import MediaIndex
from mediaindex.index.store import SearchFilters
from mediaindex.models.images import check_image
from mediaindex.models.vision import FRAME_VECTOR, IMAGE_VECTOR, load_classifier, load_clip
from mediaindex.segments import Hit

_RRF_K = 60  # the usual constant: damps the weight of the first few ranks


def fuse(ranked: list[list[Hit]], limit: int) -> list[Hit]:
    """Reciprocal-rank fusion of hit lists; a lone list is returned as it is (its scores kept)."""
    ranked = [r for r in ranked if r]
    if len(ranked) <= 1:
        return (ranked[0] if ranked else [])[:limit]
    scores: dict[tuple, float] = {}
    first: dict[tuple, Hit] = {}
    for hits in ranked:
        for rank, hit in enumerate(hits):
            key = (hit.video_id, hit.modality, round(hit.start, 3), round(hit.end, 3))
            scores[key] = scores.get(key, 0.0) + 1.0 / (_RRF_K + rank + 1)
            first.setdefault(key, hit)
    order = sorted(scores, key=lambda k: -scores[k])[:limit]
    return [replace(first[k], score=round(scores[k], 6)) for k in order]


def _visual(filters: SearchFilters | None) -> SearchFilters:
    base = filters or SearchFilters()
    if base.modality not in (None, "visual"):
        raise MediaIndexError(f"image search finds visual segments only, not {base.modality!r} ones")
    return replace(base, modality="visual")


def search_image(index: MediaIndex, settings: VisionSettings, image: np.ndarray, limit: int = 10,
                 filters: SearchFilters | None = None) -> list[Hit]:
    """Shots that look like `image`: through the classifier's "frame" vector and, when configured,
    the CLIP "image" vector."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    image = check_image(image)
    classifier, clip = load_classifier(settings), load_clip(settings)
    if classifier is None and clip is None:
        raise MediaIndexError("image search needs vision.classifier or vision.clip to be configured")
    where = _visual(filters)
    lists = []
    if classifier is not None:
        lists.append(index.store.search(classifier.features([image])[0], limit, where, using=FRAME_VECTOR))
    if clip is not None:
        lists.append(index.store.search(clip.embed_images([image])[0], limit, where, using=IMAGE_VECTOR))
    return fuse(lists, limit)


def clip_text_hits(index: MediaIndex, settings: VisionSettings, query: str, limit: int,
                   filters: SearchFilters | None = None) -> list[Hit]:
    """Shots whose CLIP image embedding is near the query's CLIP text embedding; [] without CLIP."""
    clip = load_clip(settings)
    if clip is None or (filters and filters.modality not in (None, "visual")):
        return []
    return index.store.search(clip.embed_query(query), limit, _visual(filters), using=IMAGE_VECTOR)
