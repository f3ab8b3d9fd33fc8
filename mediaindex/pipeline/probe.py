"""Probe a media file before decoding: streams, duration, codecs, rotation, frame rate."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mediaindex.errors import MediaError


@dataclass(frozen=True)
class MediaInfo:
    path: str
    size: int
    duration: float
    container: str
    has_audio: bool
    has_video: bool
    audio_codec: str | None = None
    sample_rate: int | None = None
    channels: int | None = None
    video_codec: str | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    rotation: int = 0
    variable_frame_rate: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe(path: str | Path) -> MediaInfo:
    """Read container metadata with PyAV (FFmpeg's libraries, in-process; no ffprobe binary needed)."""
    import av

    path = Path(path)
    if not path.exists():
        raise MediaError(str(path), "file not found")
    if not path.is_file():
        raise MediaError(str(path), "not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise MediaError(str(path), "empty file (0 bytes)")
    if not os.access(path, os.R_OK):
        raise MediaError(str(path), "permission denied")
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            audio = next(iter(container.streams.audio), None)
            video = next((v for v in container.streams.video if not _is_cover_art(v)), None)
            duration = _duration(container, audio, video)
            fps = float(video.average_rate) if video is not None and video.average_rate else None
            guessed = float(video.guessed_rate) if video is not None and video.guessed_rate else None
            return MediaInfo(
                path=str(path),
                size=size,
                duration=duration,
                container=container.format.name,
                has_audio=audio is not None,
                has_video=video is not None,
                audio_codec=audio.codec_context.name if audio is not None else None,
                sample_rate=audio.codec_context.sample_rate if audio is not None else None,
                channels=audio.codec_context.channels if audio is not None else None,
                video_codec=video.codec_context.name if video is not None else None,
                width=video.codec_context.width if video is not None else None,
                height=video.codec_context.height if video is not None else None,
                fps=fps,
                rotation=_rotation(video),
                variable_frame_rate=bool(fps and guessed and abs(fps - guessed) / guessed > 0.01),
            )
    except av.error.FFmpegError as exc:
        raise MediaError(str(path), f"not a readable media file ({exc.strerror or type(exc).__name__})") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise MediaError(str(path), f"not a readable media file ({exc})") from exc


def _is_cover_art(stream: Any) -> bool:
    return bool(stream.disposition & getattr(stream.disposition, "attached_pic", 0)) if hasattr(
        stream, "disposition"
    ) else False


def _duration(container: Any, audio: Any, video: Any) -> float:
    if container.duration:
        return container.duration / 1_000_000
    for stream in (video, audio):
        if stream is not None and stream.duration and stream.time_base:
            return float(stream.duration * stream.time_base)
    return 0.0


def _rotation(video: Any) -> int:
    if video is None:
        return 0
    try:
        for side_data in video.side_data if hasattr(video, "side_data") else []:
            if "rotation" in str(side_data).lower():
                return int(round(float(getattr(side_data, "rotation", 0)))) % 360
    except Exception:  # side data layouts differ across PyAV versions; rotation is informative only
        return 0
    rotate = (video.metadata or {}).get("rotate")
    return int(rotate) % 360 if rotate and rotate.lstrip("-").isdigit() else 0
