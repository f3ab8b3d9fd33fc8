"""Shot boundaries with PySceneDetect's content detector, fed frame by frame during one decode pass.

The detector sees frames downscaled exactly as PySceneDetect's own SceneManager does (to about
256 px wide, bilinear), so cuts match what its `detect()` reports, but the frames come from our
single decoding pass instead of a second one. Timecodes are built from each frame's presentation
timestamp, so variable-frame-rate video gets correct times.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import cv2
import numpy as np
from scenedetect.common import FrameTimecode, Timecode
from scenedetect.detectors import ContentDetector
from scenedetect.scene_manager import compute_downscale_factor


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

    def small(self, bgr: np.ndarray) -> np.ndarray:
        if self._factor <= 1.0:
            return bgr
        size = (max(1, round(bgr.shape[1] / self._factor)), max(1, round(bgr.shape[0] / self._factor)))
        return cv2.resize(bgr, size, interpolation=cv2.INTER_LINEAR)

    def feed(self, pts: int, time_base: Fraction, bgr: np.ndarray) -> list[float]:
        """Process one frame (full-size BGR); returns cut times (seconds) found at this frame."""
        timecode = FrameTimecode(Timecode(pts=pts, time_base=time_base), fps=self._rate)
        self._last = timecode
        found = [tc.seconds for tc in self._detector.process_frame(timecode, self.small(bgr))]
        self.cuts.extend(found)
        return found

    def finish(self) -> list[float]:
        if self._last is None:
            return []
        found = [tc.seconds for tc in self._detector.post_process(self._last)]
        self.cuts.extend(found)
        return found


def shots_from_cuts(cuts: list[float], duration: float) -> list[Shot]:
    """Shots as [start, end) spans covering 0..duration."""
    bounds = [0.0] + sorted(c for c in set(cuts) if 0.0 < c < duration) + [duration]
    return [Shot(round(a, 3), round(b, 3)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
