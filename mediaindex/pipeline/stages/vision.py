"""The vision stage: parts of the video (shots, pieces of long shots) become `ocr` segments (on-screen
text) and `visual` segments (what is in the shot, as words for the text embedder and as "frame" /
"image" vectors for image search; with `vision.people`, who is in it, named first).

The classifier looks at several frames of each part and averages their class probabilities; OCR,
the thumbnail and the CLIP vector use the part's middle frame. Consecutive parts that look the same
are one picture, read and classified once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mediaindex.config import Settings
from mediaindex.models.classifier import DESCRIPTION_PREFIX, LABEL_MIN
from mediaindex.models.images import ImageInputError, check_image, difference_hash, hash_distance
from mediaindex.models.vision import (
    FRAME_VECTOR,
    IMAGE_VECTOR,
    load_classifier,
    load_clip,
    load_people,
    load_text_reader,
)
from mediaindex.pipeline.stages.contract import StageContract, StageName
from mediaindex.pipeline.stages.item import Keyframe, MediaItem
from mediaindex.segments import CLASSES_FIELD, PEOPLE_FIELD, Segment

if TYPE_CHECKING:
    from mediaindex.models.classifier import Prediction
    from mediaindex.models.people import People


@dataclass
class Picture:
    """A run of consecutive parts whose pictures are near-identical: looked at once, indexed as one span."""

    start: float
    end: float
    image: np.ndarray  # the first part's picture: read by OCR, its thumbnail shown
    thumbnail: str | None
    hash: np.ndarray
    # What the classifier pools over: the run's frames with near-duplicates folded into the first
    # like them, each weighted by how many frames it stands for.
    samples: list[np.ndarray] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    hashes: list[np.ndarray] = field(default_factory=list)

    def add_samples(self, images: list[np.ndarray], max_distance: float, limit: int) -> None:
        for image in images:
            h = difference_hash(image)
            near = next((i for i, other in enumerate(self.hashes) if hash_distance(other, h) < max_distance), None)
            if near is not None:
                self.weights[near] += 1.0
            elif len(self.samples) < limit:
                self.samples.append(image)
                self.weights.append(1.0)
                self.hashes.append(h)


def group_pictures(parts: list[tuple[Keyframe, np.ndarray, list[np.ndarray]]], max_distance: float,
                   max_samples: int = 5) -> list[Picture]:
    """Consecutive parts with near-identical pictures become one Picture; each keeps at most
    `max_samples` distinct frames for the classifier."""
    pictures: list[Picture] = []
    for part, image, samples in parts:
        h = difference_hash(image)
        last = pictures[-1] if pictures else None
        # Compared with the run's first picture, so a slow drift still starts a new picture.
        if last is not None and last.image.shape == image.shape and hash_distance(last.hash, h) < max_distance:
            last.end = max(last.end, part.end)
        else:
            last = Picture(part.time, part.end, image, part.thumbnail, h)
            pictures.append(last)
        last.add_samples(samples or [image], max_distance, max_samples)
    return pictures


# How much the frames of the neighbouring pictures in a shot count towards a picture's labels.
NEIGHBOUR_WEIGHT = 0.5


class VisionStage:
    def __init__(self, settings: Settings) -> None:
        v = settings.vision
        self.settings = v
        self.max_samples = settings.frames.samples
        if v.enabled and v.device != "cuda":
            import torch

            torch.set_num_threads(v.threads or min(4, os.cpu_count() or 1))
        self.classifier = load_classifier(v)
        self.reader = load_text_reader(v)
        self.clip = load_clip(v)
        self.people = load_people(v, settings.cache_dir)
        self.frames_classified = 0  # running count, for benchmarks
        self._warm_up()
        self._work: tuple[int, int] | None = None  # (steps done, steps) of the file in hand

    def progress(self) -> float | None:
        """The share of the file in hand looked at (frames classified and pictures read, one step each; None
        between files): read from another thread while `process` runs, for the ingest's progress display."""
        work = self._work
        return min(1.0, work[0] / work[1]) if work is not None and work[1] > 0 else None

    def _stepped(self, n: int = 1) -> None:
        if self._work is not None:
            self._work = (self._work[0] + n, self._work[1])

    def _warm_up(self) -> None:
        """One pass of each model over a grey picture: their first call's set-up is paid with the load."""
        grey = np.full((96, 128, 3), 128, np.uint8)
        if self.classifier is not None:
            self.classifier.scores([grey])
        if self.reader is not None:
            self.reader.read(grey)

    def process(self, item: MediaItem) -> MediaItem:
        try:
            return self._process(item)
        finally:
            self._work = None

    def _process(self, item: MediaItem) -> MediaItem:
        if not item.keyframes or not self.settings.enabled:
            return item
        parts: list[tuple[Keyframe, np.ndarray, list[np.ndarray]]] = []
        unusable: list[str] = []
        for part in item.keyframes:
            try:
                image = check_image(part.image, f"keyframe at {part.time:.1f} s")
            except ImageInputError as exc:
                unusable.append(str(exc))
                continue
            samples = []
            for sample in part.samples:
                try:
                    samples.append(check_image(sample))
                except ImageInputError:
                    continue  # the part's picture stands in for it
            parts.append((part, image, samples))
        if unusable:
            item.notes.append(f"{len(unusable)} keyframes not usable for vision ({unusable[0]})")
        pictures = group_pictures(parts, self.settings.duplicate_distance, self.max_samples)
        classified = sum(len(p.samples) + 1 for p in pictures) if self.classifier is not None else 0
        self._work = (0, classified + (len(pictures) if self.reader is not None else 0))
        item.segments += self.visual_segments(item, pictures) + self.ocr_segments(item, pictures)
        # The pixels are not needed downstream; only times and thumbnails travel on.
        item.keyframes = [k.without_pixels() for k in item.keyframes]
        return item

    def visual_segments(self, item: MediaItem, pictures: list[Picture]) -> list[Segment]:
        if not pictures or (self.classifier is None and self.clip is None and self.people is None):
            return []
        preds = self.describe(item, pictures) if self.classifier is not None else None
        clips = self.clip.embed_images([p.image for p in pictures]) if self.clip else None
        # Who is in each picture: its frame with the most confident detection says.
        people = [self.people.best(p.samples or [p.image]) for p in pictures] if self.people is not None else None
        out = []
        for i, pic in enumerate(pictures):
            vectors: dict[str, list[float]] = {}
            extra: dict[str, Any]  # payload fields of different shapes (labels, aliases)
            text, confidence, extra = "", None, {}
            if preds is not None:
                pred = preds[i]
                vectors[FRAME_VECTOR] = pred.feature.tolist()
                # A label the classifier is not sure of is more often absurd than right (a talking
                # head as "a nematode", a title card as "a dust jacket"): such a part has no words. It
                # keeps its picture vectors, and its likely classes place it in the text space
                # (`models.label_space`), where a query ranks it, though never as a confident match.
                if pred.confidence >= LABEL_MIN:
                    text = pred.description()
                    confidence = round(pred.confidence, 4)
                    extra["labels"] = [[name, round(p, 4)] for name, p in pred.labels]
                    extra["aliases"] = pred.aliases()
                else:
                    extra[CLASSES_FIELD] = [[k, round(p, 4)] for k, p in pred.classes]
            if people is not None and people[i].count:
                text, confidence, extra = _with_people(people[i], text, confidence, extra)
            if clips is not None:
                vectors[IMAGE_VECTOR] = clips[i].tolist()
            if not text and not vectors and CLASSES_FIELD not in extra:
                continue  # nothing to find it by
            out.append(Segment(
                video_id=item.video_id, source=item.source, start=pic.start, end=pic.end, modality="visual",
                text=text, language="en" if text else None, confidence=confidence, thumbnail=pic.thumbnail,
                extra=extra, vectors=vectors,
            ))
        return out

    def describe(self, item: MediaItem, pictures: list[Picture]) -> list[Prediction]:
        """Labels for each picture from class probabilities averaged over frames of its shot.

        A single frame's top class flips between near neighbours (a bird turning its head reads as
        a dog, a mask, a bird), and one part of a shot may show only a detail (the bird's beak).
        Each picture is therefore described by its own frames and those of the pictures next to it
        in the same shot, these at half weight, each frame weighted by how many near-identical frames
        it stands for: a part that shows little is described by its shot, one that shows something
        clearly keeps its own labels, and a long shot is described by a window moving along it.
        The feature (the "frame" vector) stays the picture's own, so image search finds the very
        part that looks like a query.
        """
        assert self.classifier is not None
        images: list[np.ndarray] = []
        first: list[int] = []  # where each picture's samples start in `images`
        own: list[int] = []  # where each picture's own image is in `images`
        for pic in pictures:
            first.append(len(images))
            images += pic.samples
            at = next((i for i, s in enumerate(pic.samples) if s is pic.image), None)
            own.append(first[-1] + at if at is not None else len(images))
            if at is None:  # its samples were folded into look-alikes: classify it for its feature
                images.append(pic.image)
        probs, feats = self._scores(images)
        self.frames_classified += len(images)
        mass, weight = [], []  # per picture: weighted sum of its samples' probabilities, sum of weights
        for pic, i in zip(pictures, first, strict=True):
            w = np.asarray(pic.weights, np.float64)[:, None]
            mass.append((probs[i : i + len(pic.samples)] * w).sum(axis=0))
            weight.append(float(w.sum()))
        shots = [_shot_of(pic.start, item.shots, k) for k, pic in enumerate(pictures)]
        out = []
        for k in range(len(pictures)):
            near = [j for j in (k - 1, k + 1) if 0 <= j < len(pictures) and shots[j] == shots[k]]
            pooled = (mass[k] + NEIGHBOUR_WEIGHT * sum(mass[j] for j in near)) / (
                weight[k] + NEIGHBOUR_WEIGHT * sum(weight[j] for j in near))
            out.append(self.classifier.describe(pooled, feats[own[k]]))
        return out

    def _scores(self, images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The classifier's scores, a batch of its at a time, each counted as done when it is."""
        assert self.classifier is not None
        step = self.classifier.batch_size
        probs, feats = [], []
        for i in range(0, max(len(images), 1), step):
            p, f = self.classifier.scores(images[i : i + step])
            probs.append(p)
            feats.append(f)
            self._stepped(len(p))
        return np.concatenate(probs), np.concatenate(feats)

    def ocr_segments(self, item: MediaItem, pictures: list[Picture]) -> list[Segment]:
        if self.reader is None:
            return []
        out: list[Segment] = []
        for pic in pictures:
            lines = self.reader.read(pic.image)
            self._stepped()
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


def _with_people(seen: People, text: str, confidence: float | None,
                 extra: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
    """A picture's words name who is in it first ("a photo of two people, a suit, a bow tie"); a picture the
    classifier had no words for is described by its people alone. The detector's score stands for the label's
    probability where it is the higher."""
    score = round(seen.score, 4)
    rest = text.removeprefix(DESCRIPTION_PREFIX) if text else ""
    described = seen.description() + (f", {rest}" if rest else "")
    labels = [[name, score] for name in seen.names()] + list(extra.get("labels") or [])
    aliases = seen.aliases() + list(extra.get("aliases") or [])
    kept = {k: v for k, v in extra.items() if k != CLASSES_FIELD}  # classes place only a picture without words
    return described, max(confidence or 0.0, score), {
        **kept, "labels": labels, "aliases": aliases, PEOPLE_FIELD: {"faces": seen.faces, "persons": seen.persons}}


def _shot_of(t: float, shots: list[tuple[float, float]], picture: int) -> int:
    """The index of the shot holding time t; outside every shot (or without shots), the picture
    stands alone."""
    for i, (start, end) in enumerate(shots):
        if start - 1e-3 <= t < end - 1e-3:
            return i
    return -1 - picture

STAGE = StageContract(
    StageName.VISION, VisionStage, resources=lambda s: s.ray.stages.vision, on_cpu=lambda s: s.vision.device == "cpu",
    threads=lambda s: s.vision.threads,
    with_threads=lambda s, n: s.model_copy(update={"vision": s.vision.model_copy(update={"threads": n})}))
