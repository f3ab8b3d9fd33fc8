"""People in a picture: MediaPipe's BlazeFace (full range) and BlazePose person detector, run by LiteRT.

ImageNet-1k, which the classifier names pictures by, has no class for a person: a shot of two people talking is a
"suit" or a "bow tie" to it. These two detectors (their weights come out of MediaPipe's wheel, checked against pinned
SHA-256s: `bundled.MEDIAPIPE_DETECTORS`) count the faces and the people in a frame, and a picture with someone in it
is described for the text embedder as such ("a photo of two people").

Both are single-shot detectors over a fixed grid of anchors: each anchor's score and box offsets are decoded as
MediaPipe's own graphs configure them (`SsdAnchorsCalculator`, `TensorsToDetectionsCalculator`), then overlapping
boxes are suppressed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.bundled import MEDIAPIPE_DETECTORS, wheel_files_dir
from mediaindex.models.classifier import DESCRIPTION_PREFIX
from mediaindex.models.images import check_image
from mediaindex.serving.digest import file_sha256, has_sha256

# Boxes overlapping more than this (intersection over union) are one detection (MediaPipe's graphs use 0.3).
SUPPRESSION_IOU = 0.3


@dataclass(frozen=True)
class DetectorSpec:
    file: str  # its file name in the cache folder
    side: int  # the square input, in pixels
    strides: tuple[int, ...]  # one per anchor layer; consecutive layers of one stride share a grid
    anchors_per_layer: int
    min_score: float


# A detection counts from 0.7: at MediaPipe's default 0.5 the fitting set's pictures gave faces in a red title card's
# fist icon and a rocket (0.51-0.68) and people in a parrot, a leaf and the same card (0.51-0.61); its faces and
# people scored 0.63-0.97.
MIN_SCORE = 0.7
FACE = DetectorSpec("face_detection_full_range_sparse.tflite", 192, (4,), 1, MIN_SCORE)
PERSON = DetectorSpec("pose_detection.tflite", 224, (8, 16, 32, 32, 32), 2, MIN_SCORE)

# German and Korean words for what a description names, indexed as exact words (like the classifier's kinds).
ALIASES = {"person": ["Person", "Mensch", "사람"], "people": ["Menschen", "Leute", "사람들"]}


@dataclass(frozen=True)
class People:
    """Who is in a picture: how many faces and people were found, and the most confident detection's score."""

    faces: int = 0
    persons: int = 0
    score: float = 0.0

    @property
    def count(self) -> int:
        return max(self.faces, self.persons)

    def names(self) -> list[str]:
        """What the description names: a person, or people."""
        return [] if not self.count else ["person"] if self.count == 1 else ["people"]

    def description(self) -> str:
        """"a photo of a person", "a photo of two people", "a photo of a group of people".

        A face counts as a person seen; it is not named apart: "a face" drew every query about an animal's face or
        an eye towards these shots."""
        if not self.count:
            return ""
        return DESCRIPTION_PREFIX + {1: "a person", 2: "two people"}.get(self.count, "a group of people")

    def aliases(self) -> list[str]:
        return [word for name in self.names() for word in ALIASES[name]]


def anchors(spec: DetectorSpec) -> np.ndarray:
    """Anchor centres (n, 2) in [0, 1], in the order of the model's outputs; each anchor is the whole input."""
    out: list[np.ndarray] = []
    i = 0
    while i < len(spec.strides):
        stride = spec.strides[i]
        same = 1
        while i + same < len(spec.strides) and spec.strides[i + same] == stride:
            same += 1
        cells = int(np.ceil(spec.side / stride))
        centres = (np.arange(cells) + 0.5) / cells
        ys, xs = np.meshgrid(centres, centres, indexing="ij")
        grid = np.stack([xs.ravel(), ys.ravel()], axis=1)
        out.append(np.repeat(grid, spec.anchors_per_layer * same, axis=0))
        i += same
    return np.concatenate(out)


def letterbox(image: np.ndarray, side: int) -> np.ndarray:
    """The picture scaled to fit a `side` square, centred on black, as the detectors' [-1, 1] input."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    square = np.zeros((side, side, 3), np.uint8)
    x, y = (side - size[0]) // 2, (side - size[1]) // 2
    square[y : y + size[1], x : x + size[0]] = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR))
    return square.astype(np.float32) / 127.5 - 1.0


def suppress(boxes: np.ndarray, scores: np.ndarray, iou: float = SUPPRESSION_IOU) -> list[int]:
    """Indices of the boxes (x0, y0, x1, y1) kept, best first: each box overlapping a better kept one by more than
    `iou` (intersection over union) goes. OpenCV's non-maximum suppression."""
    import cv2

    if not len(boxes):
        return []
    xywh = np.c_[boxes[:, :2], boxes[:, 2:] - boxes[:, :2]].astype(np.float32).tolist()
    return [int(i) for i in np.asarray(cv2.dnn.NMSBoxes(xywh, scores.astype(np.float32).tolist(), 0.0, iou)).ravel()]


class _Detector:
    """One LiteRT model and its anchors; `detect` gives the scores of the detections kept."""

    def __init__(self, path: Path, spec: DetectorSpec, threads: int) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.spec = spec
        self.anchors = anchors(spec)
        with _native_stderr_muted():
            try:
                self.interpreter = Interpreter(model_path=str(path), num_threads=max(1, threads))
                self.interpreter.allocate_tensors()
            except (ValueError, RuntimeError) as exc:
                raise ModelLoadError(f"{path} is not a model LiteRT can run ({exc})") from exc
        self.input = self.interpreter.get_input_details()[0]["index"]
        outputs = self.interpreter.get_output_details()
        boxes = [o for o in outputs if o["shape"][-1] > 1]
        scores = [o for o in outputs if o["shape"][-1] == 1]
        if (len(boxes), len(scores)) != (1, 1) or any(o["shape"][1] != len(self.anchors) for o in outputs):
            raise ModelLoadError(f"{path}: the model's outputs {[list(o['shape']) for o in outputs]} are not a "
                                 f"detector's over {len(self.anchors)} anchors")
        self.boxes, self.scores = boxes[0]["index"], scores[0]["index"]
        self.lock = threading.Lock()  # an interpreter runs one picture at a time

    def detect(self, image: np.ndarray) -> np.ndarray:
        side = self.spec.side
        with self.lock:
            self.interpreter.set_tensor(self.input, letterbox(image, side)[None])
            self.interpreter.invoke()
            raw = self.interpreter.get_tensor(self.boxes)[0]
            logits = self.interpreter.get_tensor(self.scores)[0, :, 0]
        scores = 1.0 / (1.0 + np.exp(-np.clip(logits.astype(np.float64), -100.0, 100.0)))
        keep = scores >= self.spec.min_score
        if not keep.any():
            return np.zeros(0)
        centre = raw[keep, :2] / side + self.anchors[keep]
        size = raw[keep, 2:4] / side
        boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
        return scores[keep][suppress(boxes, scores[keep])]


_MUTE = threading.Lock()


@contextlib.contextmanager
def _native_stderr_muted() -> Iterator[None]:
    """LiteRT's C++ side prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on the process's stderr
    as it starts (no setting turns it off); a command's terminal should not show it."""
    with _MUTE:
        sys.stderr.flush()
        saved = os.dup(2)
        quiet = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(quiet, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(quiet)


class PeopleDetector:
    """Faces and people in pictures; `predict` returns one `People` per picture."""

    def __init__(self, folder: Path, threads: int = 1) -> None:
        self.face = _Detector(_checked(folder, FACE), FACE, threads)
        self.person = _Detector(_checked(folder, PERSON), PERSON, threads)

    def people(self, image: np.ndarray) -> People:
        image = check_image(image)
        faces, persons = self.face.detect(image), self.person.detect(image)
        return People(len(faces), len(persons), float(max([*faces, *persons], default=0.0)))

    def predict(self, images: list[np.ndarray]) -> list[People]:
        return [self.people(im) for im in images]

    def best(self, frames: list[np.ndarray]) -> People:
        """Who is in a picture seen in several frames: the frame with the most confident detection."""
        return max((self.people(f) for f in frames), key=lambda p: p.score, default=People())


def detector_dir(cache_dir: Path) -> Path:
    """The detectors' folder in the cache; a clear error where they were never fetched."""
    folder = wheel_files_dir(MEDIAPIPE_DETECTORS, cache_dir)
    if folder is None:
        raise ModelLoadError(f"the people detectors are not in the model cache {cache_dir}: run `mediaindex models "
                             f"fetch {MEDIAPIPE_DETECTORS.name}` (downloads {MEDIAPIPE_DETECTORS.requirement}'s wheel, "
                             "about 35 MB, and keeps two files of it), or set vision.people: false")
    return folder


def _checked(folder: Path, spec: DetectorSpec) -> Path:
    """The model file, refused unless it is the pinned one."""
    path = folder / spec.file
    want = dict((Path(member).name, sha) for member, sha in MEDIAPIPE_DETECTORS.files)[spec.file]
    if has_sha256(path, want):
        return path
    try:
        got = file_sha256(path)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path} ({exc.strerror or exc}): run `mediaindex models fetch "
                             f"{MEDIAPIPE_DETECTORS.name}` again") from exc
    if got != want:
        raise ModelLoadError(f"{path} is damaged (SHA-256 {got}, expected {want}): delete {folder} and run "
                             f"`mediaindex models fetch {MEDIAPIPE_DETECTORS.name}` again")
    return path
