"""The vision models of a configuration: which named vectors they add to the index, loaded once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mediaindex.config import VisionSettings
from mediaindex.models.cache import cached

if TYPE_CHECKING:
    from mediaindex.models.classifier import ImageClassifier
    from mediaindex.models.clip import ClipEmbedder
    from mediaindex.models.ocr import TextReader
    from mediaindex.models.people import PeopleDetector

FRAME_VECTOR = "frame"  # the classifier's pooled feature: image-to-image similarity
IMAGE_VECTOR = "image"  # a CLIP-family image embedding: shares a space with its text tower


def vector_dims(settings: VisionSettings) -> dict[str, int]:
    """The extra vectors an index needs for this configuration, from configs only (no weights load)."""
    from mediaindex.models.classifier import feature_dim

    if not settings.enabled:
        return {}
    dims: dict[str, int] = {}
    if settings.classifier:
        dims[FRAME_VECTOR] = feature_dim(settings.classifier)
    if clip := settings.clip:
        from mediaindex.models.clip import clip_dim

        dims[IMAGE_VECTOR] = cached(("clip-dim", clip), lambda: clip_dim(clip))
    return dims


def load_classifier(settings: VisionSettings) -> ImageClassifier | None:
    from mediaindex.models.classifier import ImageClassifier

    classifier = settings.classifier
    if not (settings.enabled and classifier):
        return None
    key = ("classifier", classifier, settings.device, settings.batch_size, settings.label_threshold,
           settings.max_labels, settings.classifier_view)
    return cached(key, lambda: ImageClassifier(classifier, settings.device, settings.batch_size,
                                               settings.label_threshold, settings.max_labels,
                                               settings.classifier_view))


def load_text_reader(settings: VisionSettings) -> TextReader | None:
    from mediaindex.models.ocr import TextReader

    if not (settings.enabled and settings.ocr):
        return None
    key = ("ocr", settings.ocr_model, settings.ocr_min_confidence, settings.ocr_side, settings.threads)
    return cached(key, lambda: TextReader(settings.ocr_min_confidence, settings.ocr_side, settings.threads,
                                          model=settings.ocr_model))


def load_clip(settings: VisionSettings) -> ClipEmbedder | None:
    from mediaindex.models.clip import ClipEmbedder

    clip = settings.clip
    if not (settings.enabled and clip):
        return None
    key = ("clip", clip, settings.device, settings.batch_size, settings.clip_bits, settings.clip_group_size)
    return cached(key, lambda: ClipEmbedder(clip, settings.device, settings.batch_size,
                                            bits=settings.clip_bits, group_size=settings.clip_group_size))


def load_people(settings: VisionSettings, cache_dir: Path) -> PeopleDetector | None:
    from mediaindex.models.people import PeopleDetector, detector_dir

    if not (settings.enabled and settings.people):
        return None
    folder = detector_dir(cache_dir)
    return cached(("people", str(folder), settings.threads), lambda: PeopleDetector(folder, settings.threads or 1))
