"""Decode media with ffmpeg (through ffmpeg-python): 16 kHz mono audio and sampled frames."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ffmpeg
import numpy as np

from mediaindex.errors import MediaError
from mediaindex.pipeline.ffmpeg_bin import ffmpeg_exe

SAMPLE_RATE = 16_000


def _last_error_line(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "ffmpeg failed"


def decode_audio(path: str | Path, timeout: float | None = None) -> np.ndarray:
    """The first audio stream as 16 kHz mono float32 samples in [-1, 1]."""
    stream = (
        ffmpeg.input(str(path))["a:0"]
        .output("pipe:", format="f32le", acodec="pcm_f32le", ac=1, ar=SAMPLE_RATE)
        .global_args("-nostdin", "-hide_banner", "-loglevel", "error")
    )
    try:
        proc = subprocess.run(
            stream.compile(cmd=ffmpeg_exe()), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise MediaError(str(path), f"audio decoding took longer than {timeout:.0f} s and was stopped") from exc
    if proc.returncode != 0:
        raise MediaError(str(path), f"audio cannot be decoded: {_last_error_line(proc.stderr)}")
    return np.frombuffer(proc.stdout, dtype=np.float32).copy()


@dataclass(frozen=True)
class Frame:
    time: float  # presentation time in seconds
    image: np.ndarray  # H x W x 3 uint8 RGB


def sample_frames(
    path: str | Path, width: int, height: int, interval: float, max_side: int, timeout: float | None = None
) -> Iterator[Frame]:
    """Frames at a fixed interval, scaled so the longer side is at most `max_side`.

    Frames are streamed from ffmpeg's pipe one at a time, so a long video is never held whole.
    """
    scale = min(1.0, max_side / max(width, height))
    out_w, out_h = max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2)
    stream = (
        ffmpeg.input(str(path))["v:0"]
        .filter("fps", fps=1.0 / interval, round="down")
        .filter("scale", out_w, out_h)
        .output("pipe:", format="rawvideo", pix_fmt="rgb24")
        .global_args("-nostdin", "-hide_banner", "-loglevel", "error")
    )
    proc = subprocess.Popen(stream.compile(cmd=ffmpeg_exe()), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    frame_bytes = out_w * out_h * 3
    index = 0
    try:
        assert proc.stdout is not None
        while True:
            buf = proc.stdout.read(frame_bytes)
            if len(buf) < frame_bytes:
                break
            image = np.frombuffer(buf, dtype=np.uint8).reshape(out_h, out_w, 3)
            yield Frame(time=round(index * interval, 3), image=image)
            index += 1
        _, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0 and index == 0:
            raise MediaError(str(path), f"video cannot be decoded: {_last_error_line(stderr)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
