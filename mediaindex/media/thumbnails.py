"""Small keyframe thumbnails for search results and the web page: encoded by the decode stage, saved by the
index writer into the index's data directory."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from PIL import Image

FORMATS = {"jpeg": ("jpg", "JPEG"), "webp": ("webp", "WEBP")}


def thumbnail_name(video_id: str, t: float, fmt: str = "jpeg") -> str:
    """The thumbnail's path relative to the thumbnail folder: one folder per video, named by time (ms)."""
    return f"{video_id}/{int(round(t * 1000)):09d}.{FORMATS[fmt][0]}"


def encode_thumbnail(image: np.ndarray, side: int, fmt: str = "jpeg", quality: int = 80) -> bytes:
    """An RGB image scaled to fit `side` x `side`, encoded as `fmt`."""
    thumb = Image.fromarray(np.ascontiguousarray(image))
    thumb.thumbnail((side, side), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    thumb.save(out, format=FORMATS[fmt][1], quality=quality)
    return out.getvalue()


def save_thumbnails(thumbs_dir: Path, files: Mapping[str, bytes]) -> None:
    """Write encoded thumbnails under their relative names. Each is written under a temporary name and
    renamed, so a reader never sees half a file."""
    for rel, data in files.items():
        target = thumbs_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
