"""Probe a media file before decoding: streams, duration, codecs, rotation, aspect, frame rate.

PyAV reads the container in-process (no ffprobe binary is needed). The result travels with the
file through the stages and is stored in the catalog record, so it must stay JSON-serialisable.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from mediaindex.errors import MediaError, is_utf8
from mediaindex.segments import audio_track_label


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
    width: int | None = None  # coded size, before rotation and aspect correction
    height: int | None = None
    fps: float | None = None  # average frame rate
    rotation: int = 0  # degrees clockwise a player turns the picture (0, 90, 180, 270)
    variable_frame_rate: bool = False
    sample_aspect_ratio: str = "1:1"  # pixel shape; not 1:1 for anamorphic video
    display_width: int | None = None  # the picture as shown: aspect-corrected, then rotated
    display_height: int | None = None
    audio_streams: int = 0
    # Each audio stream in the file's order: {"language", "title", "default", "channels", "sample_rate",
    # "duration"} (`audio_track`); the top-level audio fields describe the default one (else the first).
    audio_tracks: list[dict[str, Any]] = field(default_factory=list)
    transcribed_tracks: int | None = None  # how many of them the speech stage transcribed (speech.audio_tracks)
    video_streams: int = 0
    cover_art: bool = False  # a picture stored as a one-frame stream (an album's or a podcast's cover)
    subtitle_streams: int = 0
    # The file's chapter markers in time order, {"start", "end", "title"} (`chapter_markers`)
    chapters: list[dict[str, Any]] = field(default_factory=list)
    # [name, size, mtime_ns] of each subtitle file read with it (`subtitles.subtitle_signature`)
    subtitle_files: list[list[str | int]] = field(default_factory=list)
    bit_rate: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Why a file whose name is in another encoding than UTF-8 (an old Latin-1 archive) is refused: neither ffmpeg's
# command line as built here nor the job store, the catalog and the index can hold its name as text.
NOT_UTF8_NAME = ("its name is not UTF-8 text, which the index stores names as: rename it "
                 "(e.g. `convmv -f latin1 -t utf-8 --notest`)")


def probe(path: str | Path) -> MediaInfo:
    """Read container metadata with PyAV; refuse files that are not media with a specific reason."""
    import av

    path = Path(path)
    if not is_utf8(str(path)):
        raise MediaError(str(path), NOT_UTF8_NAME)
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
        # The I/O timeout turns a read that blocks (a stalled network mount) into an error.
        with av.open(str(path), metadata_errors="ignore", timeout=60.0) as container:
            audios = list(container.streams.audio)
            videos = [v for v in container.streams.video if not is_cover_art(v)]
            tracks = [audio_track(a) for a in audios]
            audio = audios[track_order(tracks)[0]] if audios else None
            video = next(iter(videos), None)
            duration = _duration(container, audio, video)
            fps = float(video.average_rate) if video is not None and video.average_rate else None
            guessed = float(video.guessed_rate) if video is not None and video.guessed_rate else None
            width = video.codec_context.width if video is not None else None
            height = video.codec_context.height if video is not None else None
            sar = _sample_aspect(video)
            rotation = _rotation(container, video) if video is not None else 0
            display = _display_size(width, height, sar, rotation)
            chapters = chapter_markers(container, duration)
            return MediaInfo(
                path=str(path),
                size=size,
                duration=duration,
                container=container.format.name,
                has_audio=audio is not None,
                has_video=video is not None and bool(width) and bool(height),
                audio_codec=audio.codec_context.name if audio is not None else None,
                sample_rate=audio.codec_context.sample_rate if audio is not None else None,
                channels=audio.codec_context.channels if audio is not None else None,
                video_codec=video.codec_context.name if video is not None else None,
                width=width,
                height=height,
                fps=round(fps, 4) if fps else None,
                rotation=rotation,
                variable_frame_rate=bool(fps and guessed and abs(fps - guessed) / guessed > 0.01),
                sample_aspect_ratio=f"{sar.numerator}:{sar.denominator}",
                display_width=display[0] if display else None,
                display_height=display[1] if display else None,
                audio_streams=len(audios),
                audio_tracks=tracks,
                video_streams=len(videos),
                cover_art=len(videos) < len(container.streams.video),
                subtitle_streams=len(container.streams.subtitles),
                chapters=chapters,
                bit_rate=container.bit_rate or None,
            )
    except av.error.FFmpegError as exc:
        damage = _iso_media_damage(path)
        if damage:
            raise MediaError(str(path), f"not a readable media file: {damage}") from exc
        raise MediaError(str(path), f"not a readable media file ({exc.strerror or type(exc).__name__})") from exc
    except (UnicodeDecodeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        raise MediaError(str(path), f"not a readable media file ({exc})") from exc


def _iso_media_damage(path: Path) -> str | None:
    """Why an MP4/MOV file that FFmpeg refused is broken, from its top-level boxes: a file cut short
    loses the index ("moov") that players need, which FFmpeg only reports as invalid data."""
    size = path.stat().st_size
    seen: list[bytes] = []
    with open(path, "rb") as f:
        pos = 0
        while pos + 8 <= size and len(seen) < 1000:
            f.seek(pos)
            header = f.read(16)
            box_size, kind = int.from_bytes(header[:4], "big"), header[4:8]
            if not seen and kind != b"ftyp":
                return None  # not an ISO media file
            if box_size == 1 and len(header) == 16:
                box_size = int.from_bytes(header[8:16], "big")
            elif box_size == 0:
                box_size = size - pos
            if box_size < 8:
                return "damaged MP4/MOV box structure"
            seen.append(kind)
            if pos + box_size > size:
                return (f"truncated MP4/MOV file (ends at {size} bytes inside its '{kind.decode('latin-1')}' box, "
                        "so the index of its samples is missing)")
            pos += box_size
    if seen and b"moov" not in seen:
        return "incomplete MP4/MOV file (no 'moov' index box)"
    return None


def audio_track(stream: Any) -> dict[str, Any]:
    """What a player shows of an audio stream: its language (a two-letter code, or None), title, whether it is
    the default, and its sound and length (None where the container does not say)."""
    import av

    from mediaindex.media.subtitles import language_code

    metadata = stream.metadata or {}
    try:
        default = bool(stream.disposition & av.stream.Disposition.default)
    except (AttributeError, TypeError):
        default = False
    return {"language": language_code(metadata.get("language")), "title": metadata.get("title") or None,
            "default": default, "channels": stream.codec_context.channels,
            "sample_rate": stream.codec_context.sample_rate, "duration": _stream_duration(stream)}


def _stream_duration(stream: Any) -> float | None:
    """A stream's own length: its duration field, else the DURATION tag Matroska muxers write ("00:01:02.5")."""
    if stream.duration and stream.time_base:
        return round(float(stream.duration * stream.time_base), 3)
    tag = (stream.metadata or {}).get("DURATION", "")
    parts = tag.split(":")
    try:
        return round(int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2]), 3) if len(parts) == 3 else None
    except ValueError:
        return None


def track_order(tracks: list[dict[str, Any]]) -> list[int]:
    """The audio streams' indices as they are transcribed: the default track first (a film's original
    language, not a commentary that happens to come first), then the others in the file's order."""
    first = next((i for i, t in enumerate(tracks) if t.get("default")), 0)
    return [first] + [i for i in range(len(tracks)) if i != first] if tracks else []


def track_label(tracks: list[dict[str, Any]], stream: int) -> str:
    """Audio stream `stream` (counted from 0) as moments heard on it name it: "audio 2 (de)"."""
    sound = tracks[stream] if stream < len(tracks) else {}
    return audio_track_label(stream + 1, sound.get("language"), sound.get("title"))


def track_labels(tracks: list[dict[str, Any]]) -> list[str]:
    """A file's audio tracks named so, the default one first; none for a file of one."""
    return [track_label(tracks, n) for n in track_order(tracks)] if len(tracks) > 1 else []


def audio_track_index(tracks: list[dict[str, Any]], number: int, transcribed: int) -> int:
    """The audio stream that a track's number (1, 2, … in the file's order, as players count them) names, given
    that the first `transcribed` of `track_order` are transcribed; a clear error for one out of range or left out."""
    count = max(1, len(tracks))
    if not 1 <= number <= count:
        raise ValueError(f"it has {count} audio track{'s' if count > 1 else ''}: a track is a number from 1 to "
                         f"{count}" if count > 1 else "it has one audio track: the only track is 1")
    order = track_order(tracks) or [0]
    if order.index(number - 1) >= transcribed:
        raise ValueError(f"its audio track {number} was not transcribed (speech.audio_tracks was {transcribed} when "
                         "it was indexed; indexed again with a higher one, it is)")
    return number - 1


def chosen_track(tracks: list[dict[str, Any]], number: int | None) -> int:
    """The audio stream to hear now (to transcribe or to play, whether indexed or not): track `number`, else
    the default track; a clear error for a number the file lacks."""
    if number is None:
        return (track_order(tracks) or [0])[0]
    return audio_track_index(tracks, number, max(1, len(tracks)))


def copied_track(tracks: list[dict[str, Any]], has_audio: bool, number: int | None) -> int | None:
    """The audio stream a copy of the file (a clip, a converted copy) takes: track `number`, else for a file of
    several its default one (ffmpeg alone would take the one of most channels); None where ffmpeg's choice is the
    only one. ValueError for a track the file lacks."""
    if number is not None and not has_audio:
        raise ValueError("it has no audio track: leave out the track")
    return chosen_track(tracks, number) if len(tracks) > 1 or number is not None else None


MAX_CHAPTERS = 1000
MAX_CHAPTER_TITLE = 300


def chapter_markers(container: Any, duration: float) -> list[dict[str, Any]]:
    """The chapters a file marks (an audiobook's, a podcast's, a film's), titled, in time order and held to its
    length; one without a title names nothing, and one without an end lasts until the next (or the file's end).
    Their times are the file's as written (an MP3's are from the start of its sound, not of its encoder delay)."""
    import av

    try:
        marked = container.chapters()
    except (AttributeError, ValueError, av.error.FFmpegError):  # chapters that cannot be read are none
        return []
    length = duration if duration > 0 else float("inf")
    titled = []
    for chapter in sorted(marked, key=lambda c: c["start"] * c["time_base"])[:MAX_CHAPTERS]:
        title = " ".join(str((chapter.get("metadata") or {}).get("title") or "").split())[:MAX_CHAPTER_TITLE]
        start = max(0.0, float(chapter["start"] * chapter["time_base"]))
        end = min(float(chapter["end"] * chapter["time_base"]), length)
        if title and start < length:
            titled.append((start, end, title))
    out: list[dict[str, Any]] = []
    for n, (start, end, title) in enumerate(titled):
        if end <= start:
            end = next((s for s, _, _ in titled[n + 1:] if s > start), length)
        marker = {"start": round(start, 3), "end": round(end, 3), "title": title}
        # An MP4 may mark its chapters twice (a QuickTime chapter track and Nero's list): each is kept once.
        if end > start and end < float("inf") and marker not in out:
            out.append(marker)
    return out


def is_cover_art(stream: Any) -> bool:
    """An album cover stored as a one-frame video stream is not video."""
    import av

    try:
        return bool(stream.disposition & av.stream.Disposition.attached_pic)
    except (AttributeError, TypeError):
        return False


def _duration(container: Any, audio: Any, video: Any) -> float:
    if container.duration and container.duration > 0:
        return container.duration / 1_000_000
    for stream in (video, audio):
        if stream is not None and stream.duration and stream.time_base:
            return float(stream.duration * stream.time_base)
    return 0.0


def _sample_aspect(video: Any) -> Fraction:
    sar = video.sample_aspect_ratio if video is not None else None
    if not sar or sar.numerator <= 0 or sar.denominator <= 0:
        return Fraction(1, 1)
    return Fraction(sar.numerator, sar.denominator)


def _display_size(width: int | None, height: int | None, sar: Fraction, rotation: int) -> tuple[int, int] | None:
    """Size of the picture as a player shows it: stretched by the pixel aspect, then turned."""
    if not width or not height:
        return None
    w = round(width * sar) if sar >= 1 else width
    h = height if sar >= 1 else round(height / sar)
    return (h, w) if rotation in (90, 270) else (w, h)


def _rotation(container: Any, video: Any) -> int:
    """Clockwise display rotation in degrees, from the stream's display matrix.

    PyAV exposes the display matrix on decoded frames (``VideoFrame.rotation``, counter-clockwise
    degrees, as FFmpeg's av_display_rotation_get), not on the stream, so the first frame is
    decoded. Older muxers wrote a ``rotate`` tag instead; that is the fallback.
    """
    import av

    try:
        for frame in container.decode(video):
            angle = getattr(frame, "rotation", 0) or 0
            if angle:
                return int(round(-float(angle))) % 360
            break
    except (av.error.FFmpegError, ValueError):
        pass  # an undecodable first frame is reported by the decoder, with its own reason
    rotate = (video.metadata or {}).get("rotate")
    try:
        return int(round(float(rotate))) % 360 if rotate else 0
    except ValueError:
        return 0
