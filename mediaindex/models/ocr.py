"""On-screen text with RapidOCR (PP-OCRv4 detection + recognition, ONNX models inside the wheel)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.images import check_image
from mediaindex.models.wordsplit import normalise_text


@dataclass(frozen=True)
class TextLine:
    text: str  # normalised: run-together words split
    raw: str  # as recognised
    confidence: float
    box: tuple[tuple[float, float], ...]  # four corners in the frame's pixels

    @property
    def height(self) -> float:
        ys = [y for _, y in self.box]
        return max(ys) - min(ys)


class TextReader:
    """Reads text lines from RGB frames. Frames without detected text boxes stop after detection."""

    def __init__(self, min_confidence: float = 0.6, det_side: int = 960, threads: int = 0) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise ModelLoadError("OCR needs the rapidocr-onnxruntime package") from exc
        threads = threads or min(4, os.cpu_count() or 1)
        # "max" limits the longer side instead of blowing small frames up to 736 px on the short
        # side (the library default), which cost ~5x the time on 320x180 video with no gain.
        self._ocr = RapidOCR(det_limit_side_len=det_side, det_limit_type="max", intra_op_num_threads=threads,
                             inter_op_num_threads=1, print_verbose=False)
        self.min_confidence = min_confidence

    def read(self, image: np.ndarray) -> list[TextLine]:
        """Text lines top to bottom; lines below `min_confidence` are dropped as misreads."""
        rgb = check_image(image)
        result, _ = self._ocr(np.ascontiguousarray(rgb[:, :, ::-1]), use_cls=False)  # RapidOCR takes BGR arrays
        lines: list[TextLine] = []
        for box, text, score in result or []:
            raw = str(text).strip()
            if not raw or float(score) < self.min_confidence:
                continue
            corners = tuple((float(x), float(y)) for x, y in box)
            lines.append(TextLine(normalise_text(raw), raw, float(score), corners))
        lines.sort(key=lambda ln: (min(y for _, y in ln.box), min(x for x, _ in ln.box)))
        return lines
