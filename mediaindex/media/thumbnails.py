"""Small keyframe thumbnails in the index's data directory, for search results and the web page."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

FORMATS = {"jpeg": ("jpg", "JPEG"), "webp": ("webp", "WEBP")}


def thumbnail_name(video_id: str, t: float, fmt: str = "jpeg") -> str:
    """The thumbnail's path relative to the thumbnail folder: one folder per video, named by time (ms)."""
    return f"{video_id}/{int(round(t * 1000)):09d}.{FORMATS[fmt][0]}"


def write_thumbnail(
    image: np.ndarray, thumbs_dir: Path, video_id: str, t: float, side: int, fmt: str = "jpeg", quality: int = 80
) -> str:
    """Write an RGB image scaled to fit `side` x `side`; returns its path relative to `thumbs_dir`.

    Written under a temporary name and renamed, so a reader never sees half a file.
    """
    rel = thumbnail_name(video_id, t, fmt)
    target = thumbs_dir / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    thumb = Image.fromarray(np.ascontiguousarray(image))
    thumb.thumbnail((side, side), Image.Resampling.BILINEAR)
    tmp = target.with_name(f".{target.name}.tmp")
    thumb.save(tmp, format=FORMATS[fmt][1], quality=quality)
    os.replace(tmp, target)
    return rel
