"""On-screen text with RapidOCR (PP-OCRv4 detection + recognition, ONNX models inside the wheel)."""

from __future__ import annotations

import difflib
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


# A box read with less confidence than this gets a second look: it may hold two lines of text that
# the detector joined (stacked title lines whose letters touch), which the recogniser, made for one
# line, reads as one garbled word ("Big Buck / BUNNY" as "BORKSY").
RECHECK_BELOW = 0.85
SPLITS = (0.5, 0.4, 0.6)  # where, as a fraction of the box's height, a second line may start
OVERLAP = 0.06  # each band reaches this fraction of the height past the split (ascenders, descenders)
MIN_LINE_PX = 12


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
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # RapidOCR takes BGR arrays
        result, _ = self._ocr(bgr, use_cls=False)
        found: list[tuple[str, float, tuple[tuple[float, float], ...]]] = []
        for box, text, score in result or []:
            corners = tuple((float(x), float(y)) for x, y in box)
            read = [(str(text).strip(), float(score), corners)]
            if float(score) < RECHECK_BELOW:
                read = self._as_two_lines(bgr, corners, float(score)) or read
            found += read
        lines = [TextLine(normalise_text(raw), raw, score, corners) for raw, score, corners in found
                 if raw and score >= self.min_confidence]
        lines.sort(key=lambda ln: (min(y for _, y in ln.box), min(x for x, _ in ln.box)))
        return lines

    def _recognise(self, bgr: np.ndarray) -> tuple[str, float]:
        result, _ = self._ocr(np.ascontiguousarray(bgr), use_det=False, use_cls=False)
        if not result:
            return "", 0.0
        text, score = result[0]
        return str(text).strip(), float(score)

    def _as_two_lines(self, bgr: np.ndarray, box: tuple[tuple[float, float], ...], whole: float
                      ) -> list[tuple[str, float, tuple[tuple[float, float], ...]]] | None:
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
            read = []
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
