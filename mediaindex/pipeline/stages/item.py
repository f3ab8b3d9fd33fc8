"""The unit of work that flows through the ingestion stages, one per media file."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mediaindex.media.decode import Frame
from mediaindex.media.probe import MediaInfo
from mediaindex.segments import Segment


@dataclass
class Keyframe:
    """One part of the video (a shot, or a piece of a long shot) as the vision stage sees it."""

    time: float
    end: float  # the part is [time, end)
    image: np.ndarray  # its picture: the frame nearest the middle (OCR, thumbnail, image vectors)
    thumbnail: str | None  # its name in `MediaItem.thumbnail_files`: relative to the index's thumbnail folder
    # Frames spread over the part, the picture among them: the classifier pools over them.
    # Empty means the picture alone.
    samples: list[np.ndarray] = field(default_factory=list)

    def without_pixels(self) -> Keyframe:
        """The same part with its images dropped: only times and the thumbnail travel on."""
        return Keyframe(self.time, self.end, np.empty((0, 0, 3), np.uint8), self.thumbnail)


@dataclass
class MediaItem:
    source: str  # absolute path
    video_id: str
    content_hash: str
    size: int
    mtime_ns: int
    info: MediaInfo
    audio: np.ndarray | None = None  # 16 kHz mono float32; dropped after the speech stage
    keyframes: list[Keyframe] = field(default_factory=list)  # dropped after the vision stage
    # Encoded keyframe thumbnails by their name relative to the index's thumbnail folder; the writer saves them.
    thumbnail_files: dict[str, bytes] = field(default_factory=dict)
    cover: str | None = None  # the thumbnail of a file without video that has a cover picture (`thumbnail_files`)
    shots: list[tuple[float, float]] = field(default_factory=list)  # [start, end) of each shot, seconds
    segments: list[Segment] = field(default_factory=list)
    vectors: np.ndarray | None = None
    language: str | None = None
    notes: list[str] = field(default_factory=list)  # non-fatal problems, shown to the user
    summary_failure: str | None = None  # why the summary stage made no summary (its note says so too)

    def thumbnail_at(self, t: float) -> str | None:
        """The thumbnail of the keyframe nearest before time t (a file without video: its cover, if any)."""
        best = None
        for frame in self.keyframes:
            if frame.time <= t + 1e-6:
                best = frame.thumbnail
            else:
                break
        return best if best is not None else (self.keyframes[0].thumbnail if self.keyframes else self.cover)


__all__ = ["Frame", "Keyframe", "MediaItem"]
