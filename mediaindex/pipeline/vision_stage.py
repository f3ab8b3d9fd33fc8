"""The vision stage: keyframes become `ocr` segments (on-screen text) and `visual` segments (what is
in the shot, as words for the text embedder and as "frame" / "image" vectors for image search)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from mediaindex.config import Settings
from mediaindex.models.images import ImageInputError, check_image, difference_hash, hash_distance
from mediaindex.models.vision import FRAME_VECTOR, IMAGE_VECTOR, load_classifier, load_clip, load_text_reader
from mediaindex.pipeline.item import Keyframe, MediaItem
from mediaindex.segments import Segment


@dataclass
class Picture:
    """A run of near-identical consecutive keyframes: looked at once, indexed as one span."""

    start: float
    end: float
    image: np.ndarray  # the first keyframe's picture
    thumbnail: str | None
    hash: np.ndarray


def group_pictures(frames: list[tuple[Keyframe, np.ndarray]], max_distance: float) -> list[Picture]:
    pictures: list[Picture] = []
    for frame, image in frames:
        h = difference_hash(image)
        last = pictures[-1] if pictures else None
        # Compared with the run's first frame, so a slow drift still starts a new picture.
        if last is not None and last.image.shape == image.shape and hash_distance(last.hash, h) < max_distance:
            last.end = max(last.end, frame.end)
            continue
        pictures.append(Picture(frame.time, frame.end, image, frame.thumbnail, h))
    return pictures


class VisionStage:
    def __init__(self, settings: Settings) -> None:
        v = settings.vision
        self.settings = v
        if v.enabled and v.device != "cuda":
            import torch

            torch.set_num_threads(v.threads or min(4, os.cpu_count() or 1))
        self.classifier = load_classifier(v)
        self.reader = load_text_reader(v)
        self.clip = load_clip(v)

    def process(self, item: MediaItem) -> MediaItem:
        if not item.keyframes or not self.settings.enabled:
            return item
        frames: list[tuple[Keyframe, np.ndarray]] = []
        unusable: list[str] = []
        for frame in item.keyframes:
            try:
                frames.append((frame, check_image(frame.image, f"keyframe at {frame.time:.1f} s")))
            except ImageInputError as exc:
                unusable.append(str(exc))
        if unusable:
            item.notes.append(f"{len(unusable)} keyframes not usable for vision ({unusable[0]})")
        pictures = group_pictures(frames, self.settings.duplicate_distance)
        item.segments += self.visual_segments(item, pictures) + self.ocr_segments(item, pictures)
        # The pixels are not needed downstream; only times and thumbnails travel on.
        item.keyframes = [Keyframe(k.time, k.end, np.empty((0, 0, 3), np.uint8), k.thumbnail) for k in item.keyframes]
        return item

    def visual_segments(self, item: MediaItem, pictures: list[Picture]) -> list[Segment]:
        if not pictures or (self.classifier is None and self.clip is None):
            return []
        images = [p.image for p in pictures]
        preds = self.classifier.predict(images) if self.classifier else None
        clips = self.clip.embed_images(images) if self.clip else None
        out = []
        for i, pic in enumerate(pictures):
            vectors: dict[str, list[float]] = {}
            text, confidence, extra = "", None, {}
            if preds is not None:
                pred = preds[i]
                vectors[FRAME_VECTOR] = pred.feature.tolist()
                text = pred.description()
                confidence = pred.labels[0][1] if pred.labels else None
                extra["labels"] = [[name, round(p, 4)] for name, p in pred.labels]
            if clips is not None:
                vectors[IMAGE_VECTOR] = clips[i].tolist()
            out.append(Segment(
                video_id=item.video_id, source=item.source, start=pic.start, end=pic.end, modality="visual",
                text=text, language="en" if text else None, confidence=confidence, thumbnail=pic.thumbnail,
                extra=extra, vectors=vectors,
            ))
        return out

    def ocr_segments(self, item: MediaItem, pictures: list[Picture]) -> list[Segment]:
        if self.reader is None:
            return []
        out: list[Segment] = []
        for pic in pictures:
            lines = self.reader.read(pic.image)
            if not lines:
                continue
            text = " / ".join(ln.text for ln in lines)
            last = out[-1] if out else None
            if last is not None and last.text == text and abs(last.end - pic.start) < 1e-3:
                last.end = pic.end  # the same caption over different pictures: one span
                continue
            out.append(Segment(
                video_id=item.video_id, source=item.source, start=pic.start, end=pic.end, modality="ocr",
                text=text, confidence=round(float(np.mean([ln.confidence for ln in lines])), 4),
                thumbnail=pic.thumbnail, extra={"raw": [ln.raw for ln in lines]},
            ))
        return out
