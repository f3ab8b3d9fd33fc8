"""The first stage: probe, hash and decode a file into audio and keyframes (with thumbnails)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.index.catalog import content_hash, video_id_for
from mediaindex.pipeline.decode import decode_audio, sample_frames
from mediaindex.pipeline.item import Keyframe, MediaItem
from mediaindex.pipeline.probe import probe


def write_thumbnail(image: np.ndarray, thumbs_dir: Path, video_id: str, t: float, side: int) -> str:
    rel = f"{video_id}/{int(round(t * 1000)):09d}.jpg"
    target = thumbs_dir / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    thumb = Image.fromarray(image)
    thumb.thumbnail((side, side))
    tmp = target.with_suffix(".tmp")
    thumb.save(tmp, format="JPEG", quality=80)
    os.replace(tmp, target)
    return rel


def decode_media(path: str, settings: Settings) -> MediaItem:
    """Probe, hash and decode one file: audio for speech, keyframes (and thumbnails) for vision."""
    info = probe(path)
    if not info.has_audio and not info.has_video:
        raise MediaError(path, "no audio or video stream")
    if info.duration <= 0:
        raise MediaError(path, "zero duration")
    stat = Path(path).stat()
    digest = content_hash(Path(path))
    item = MediaItem(
        source=path, video_id=video_id_for(digest), content_hash=digest,
        size=stat.st_size, mtime_ns=stat.st_mtime_ns, info=info,
    )
    timeout = settings.ingest.file_timeout
    if info.has_audio:
        try:
            item.audio = decode_audio(path, timeout=timeout)
        except MediaError as exc:
            if not info.has_video:
                raise
            item.notes.append(f"audio skipped: {exc.reason}")
    else:
        item.notes.append("no audio track: nothing to transcribe")
    if info.has_video and info.width and info.height:
        interval = settings.frames.interval
        frames = list(sample_frames(path, info.width, info.height, interval, settings.frames.max_side, timeout))
        for frame in frames:
            thumb = write_thumbnail(frame.image, settings.thumbs_dir, item.video_id, frame.time,
                                    settings.frames.thumbnail_side)
            item.keyframes.append(Keyframe(frame.time, min(frame.time + interval, info.duration), frame.image, thumb))
        if not frames and item.audio is None:
            raise MediaError(path, "no decodable frames and no audio")
    return item
