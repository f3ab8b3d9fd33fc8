"""The first stage: probe and hash a file, decode its video once into shots and keyframes, read its subtitles
(its own text streams and the subtitle files beside it) into `subtitle` segments and its chapter markers into
`marker` segments.

Audio is not decoded here: the speech stage streams it from the file in chunks, so a long file's
audio never travels between stages (or sits in memory) whole.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from mediaindex.config import Settings
from mediaindex.errors import MediaError, MediaTimeoutError
from mediaindex.index.catalog import content_hash, video_id_for
from mediaindex.media.decode import cover_picture, scan_video
from mediaindex.media.probe import probe
from mediaindex.media.subtitles import passages, read_subtitles, subtitle_signature
from mediaindex.media.thumbnails import encode_thumbnail, thumbnail_name
from mediaindex.models.text_language import text_language
from mediaindex.pipeline.stages.contract import StageContract, StageName
from mediaindex.pipeline.stages.item import Keyframe, MediaItem
from mediaindex.segments import MARKER, SUBTITLE, TRACK_FIELD, Segment

__all__ = ["STAGE", "DecodeStage", "decode_media"]


def decode_media(path: str, settings: Settings) -> MediaItem:
    """Probe, hash and scan one file: shots and keyframes for the vision stage, each keyframe's thumbnail
    encoded on the item (the index writer saves them; a stage touches no index), and its subtitles' segments."""
    started = time.monotonic()
    info = probe(path)
    if not info.has_audio and not info.has_video:
        raise MediaError(path, "no audio or video stream")
    if info.duration <= 0 and not info.has_video:
        raise MediaError(path, "zero duration")
    stat = Path(path).stat()
    digest = content_hash(Path(path))
    item = MediaItem(
        source=path, video_id=video_id_for(digest), content_hash=digest,
        size=stat.st_size, mtime_ns=stat.st_mtime_ns, info=info,
    )
    if not info.has_audio:
        item.notes.append("no audio track: nothing to transcribe")
    if info.has_video:
        _scan(item, settings, started)
    elif info.cover_art:
        _add_cover(item, settings)
    _add_subtitles(item)
    _add_markers(item)
    return item


def _scan(item: MediaItem, settings: Settings, started: float) -> None:
    """Shots and keyframes (with their thumbnails) of the item's video; a video that cannot be decoded leaves a
    note where the file has sound, and fails the file where it has none."""
    path, info, f, timeout = item.source, item.info, settings.frames, settings.ingest.file_timeout
    try:
        scan = scan_video(
            path, info, interval=f.interval, max_side=f.max_side, max_keyframes=f.max_keyframes,
            shot_threshold=f.shot_threshold, min_shot_len=f.min_shot_len,
            deadline=started + timeout, timeout=timeout, samples=f.samples,
            sample_side=f.sample_side, threads=f.decode_threads,
        )
    except MediaError as exc:
        if not info.has_audio or isinstance(exc, MediaTimeoutError):
            raise
        item.notes.append(f"video skipped: {exc.reason}")
        return
    if scan.warning:
        item.notes.append(scan.warning)
    if scan.frames == 0:
        if not info.has_audio:
            raise MediaError(path, "no decodable video frames and no audio")
        item.notes.append("video skipped: no decodable frames")
        return
    item.info = dataclasses.replace(
        info,
        variable_frame_rate=info.variable_frame_rate or scan.variable_frame_rate,
        duration=info.duration if info.duration > 0 else scan.end,
    )
    item.shots = scan.shots
    for part in scan.parts:
        picture = part.keyframe
        thumb = thumbnail_name(item.video_id, picture.time, f.thumbnail_format)
        item.thumbnail_files[thumb] = encode_thumbnail(picture.image, f.thumbnail_side, f.thumbnail_format)
        item.keyframes.append(Keyframe(part.start, part.end, picture.image, thumb, [f.image for f in part.frames]))


def _add_cover(item: MediaItem, settings: Settings) -> None:
    """A sound file's cover picture (an album's, a podcast episode's) as the thumbnail of its moments; it is not
    searched (a cover is not what the file shows over time)."""
    picture = cover_picture(item.source)
    if picture is None:
        item.notes.append("its cover picture could not be read")
        return
    f = settings.frames
    item.cover = thumbnail_name(item.video_id, 0.0, f.thumbnail_format)
    item.thumbnail_files[item.cover] = encode_thumbnail(picture, f.thumbnail_side, f.thumbnail_format)


def _add_subtitles(item: MediaItem) -> None:
    """The item's subtitle tracks as `subtitle` segments, a passage of cues each; a track whose stream or file
    name gives no language is given the one its words plainly say (or none)."""
    found = read_subtitles(Path(item.source), item.info.subtitle_streams)
    item.info = dataclasses.replace(item.info, subtitle_files=subtitle_signature(Path(item.source)))
    item.notes.extend(found.notes)
    length = item.info.duration if item.info.duration > 0 else float("inf")
    for track in found.tracks:
        language = track.language or text_language(" ".join(c.text for c in track.cues))
        item.language = item.language or language  # the file's language until speech says otherwise
        item.segments += [
            Segment(item.video_id, item.source, p.start, min(p.end, length), SUBTITLE, p.text, language=language,
                    thumbnail=item.thumbnail_at(p.start), extra={TRACK_FIELD: track.origin})
            for p in passages(track.cues) if p.start < length]  # a cue past the end belongs to a longer cut


def _add_markers(item: MediaItem) -> None:
    """The file's chapter markers as `marker` segments, each spanning its chapter and saying its title: what a
    reader looks for by name in an audiobook, a podcast or a film ("the chapter on wages")."""
    chapters = item.info.chapters
    language = text_language(" ".join(c["title"] for c in chapters)) if chapters else None
    item.segments += [Segment(item.video_id, item.source, c["start"], c["end"], MARKER, c["title"], language=language,
                              thumbnail=item.thumbnail_at(c["start"])) for c in chapters]


class DecodeStage:
    """Probe, hash and decode one file (the first stage: its input is a path)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def process(self, path: str) -> MediaItem:
        return decode_media(path, self.settings)


STAGE = StageContract(
    StageName.DECODE, DecodeStage, resources=lambda s: s.ray.stages.decode, on_cpu=lambda s: False,
    threads=lambda s: s.frames.decode_threads,
    with_threads=lambda s, n: s.model_copy(update={"frames": s.frames.model_copy(update={"decode_threads": n})}))
