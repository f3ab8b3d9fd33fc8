"""Shot boundaries with PySceneDetect's content detector, fed frame by frame during one decode pass.

The detector sees frames downscaled to the size PySceneDetect's own SceneManager uses (about 256 px
wide, bilinear), so cuts match what its `detect()` reports, but the frames come from our single
decoding pass instead of a second one (`detector_picture`). Timecodes are built from each frame's
presentation timestamp, so variable-frame-rate video gets correct times.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import cv2
import numpy as np
from scenedetect.common import FrameTimecode, Timecode
from scenedetect.detectors import ContentDetector
from scenedetect.scene_manager import compute_downscale_factor

if TYPE_CHECKING:
    import av


@dataclass(frozen=True)
class Shot:
    start: float
    end: float


class ShotDetector:
    """Streaming cut detection: `feed` each decoded frame in order, then `finish`."""

    def __init__(self, width: int, frame_rate: Fraction, threshold: float = 27.0, min_shot_len: float = 0.6) -> None:
        # SUPPRESS reports a cut on the frame that triggers it (never for a frame in the past),
        # so the caller can take that very frame as the new shot's keyframe without a buffer.
        from scenedetect.detector import FlashFilter

        self._detector = ContentDetector(
            threshold=threshold, min_scene_len=min_shot_len, filter_mode=FlashFilter.Mode.SUPPRESS
        )
        self._rate = frame_rate if frame_rate > 0 else Fraction(25)
        self._factor = compute_downscale_factor(width)
        self._last: FrameTimecode | None = None
        self.cuts: list[float] = []

    def size(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) the detector wants a `width` x `height` frame scaled to."""
        if self._factor <= 1.0:
            return width, height
        return max(1, round(width / self._factor)), max(1, round(height / self._factor))

    def feed(self, pts: int, time_base: Fraction, bgr: np.ndarray) -> list[float]:
        """Process one frame, BGR at `size()`; returns cut times (seconds) found at this frame."""
        timecode = FrameTimecode(Timecode(pts=pts, time_base=time_base), fps=self._rate)
        self._last = timecode
        found = [tc.seconds for tc in self._detector.process_frame(timecode, bgr)]
        self.cuts.extend(found)
        return found

    def finish(self) -> list[float]:
        if self._last is None:
            return []
        found = [tc.seconds for tc in self._detector.post_process(self._last)]
        self.cuts.extend(found)
        return found


# Limited-range planar YUV, which OpenCV's I420 conversion expects once the chroma planes are resized
# to half the picture (full-range "yuvj" and other layouts go through swscale).
_PLANAR_YUV = frozenset({"yuv420p", "yuv422p", "yuv444p"})


def detector_picture(frame: av.VideoFrame, size: tuple[int, int]) -> np.ndarray:
    """`frame` as BGR at `size` (`ShotDetector.size`), resized as PySceneDetect does (bilinear).

    Planar YUV (nearly all video) is resized plane by plane, each read where the decoder left it,
    and only the small picture is converted: copying and converting whole frames first costs several
    times more, and swscale's own scaler is slower still. An odd `size` is converted one pixel
    larger and resized once more, which keeps the same cuts on every test video.
    """
    w, h = size
    if frame.format.name not in _PLANAR_YUV:
        whole = frame.to_ndarray(format="bgr24")
        return whole if (frame.width, frame.height) == size else cv2.resize(whole, size, interpolation=cv2.INTER_LINEAR)
    even_w, even_h = w + (w & 1), h + (h & 1)

    def plane(index: int, out: tuple[int, int]) -> np.ndarray:
        data = frame.planes[index]
        rows = np.frombuffer(memoryview(data), np.uint8).reshape(-1, data.line_size)[: data.height, : data.width]
        return cv2.resize(rows, out, interpolation=cv2.INTER_LINEAR)

    half = (even_w // 2, even_h // 2)
    y = plane(0, (even_w, even_h))
    u, v = plane(1, half), plane(2, half)
    # I420 as OpenCV reads it: the Y rows, then U and V flat, the whole buffer `even_w` wide.
    packed = np.concatenate([y.ravel(), u.ravel(), v.ravel()]).reshape(-1, even_w)
    bgr: np.ndarray = cv2.cvtColor(packed, cv2.COLOR_YUV2BGR_I420)
    return bgr if (even_w, even_h) == size else cv2.resize(bgr, size, interpolation=cv2.INTER_LINEAR)


def shots_from_cuts(cuts: list[float], duration: float) -> list[Shot]:
    """Shots as [start, end) spans covering 0..duration."""
    bounds = [0.0] + sorted(c for c in set(cuts) if 0.0 < c < duration) + [duration]
    return [Shot(round(a, 3), round(b, 3)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
