"""Find an ffmpeg binary without needing root: the system one, else the one inside imageio-ffmpeg."""

from __future__ import annotations

import functools
import os
import shutil


@functools.cache
def ffmpeg_exe() -> str:
    configured = os.environ.get("MEDIAINDEX_FFMPEG")
    if configured:
        return configured
    system = shutil.which("ffmpeg")
    if system:
        return system
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()
