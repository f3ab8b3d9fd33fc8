"""Videos, transcripts, thumbnails and the media files themselves (with HTTP range requests)."""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import os
import tempfile
import threading
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, PlainTextResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable

from mediaindex.api.deps import authorize, get_state
from mediaindex.api.errors import ApiError
from mediaindex.api.models import (
    ChapterOut,
    ErrorOut,
    LibraryOut,
    LibraryVideoOut,
    SummaryOut,
    TranscriptLine,
    VideoDetail,
    VideoOut,
)
from mediaindex.api.state import ApiState, file_title
from mediaindex.errors import MediaError, MediaIndexError
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import metadata_matches, parse_where
from mediaindex.index.store import hit_from_payload
from mediaindex.media import playable
from mediaindex.media.clip import check_span, clip_name, clip_suffix, cut
from mediaindex.media.probe import copied_track
from mediaindex.pipeline.discover import MEDIA_SUFFIXES

router = APIRouter(tags=["videos"], dependencies=[Depends(authorize)],
                   responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}, 429: {"model": ErrorOut}})
VideoId = PathParam(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")
_MEDIA_RESPONSE = {"content": {"video/*": {}, "audio/*": {}}, "description": "The bytes (206 for a range)"}
mimetypes.add_type("audio/flac", ".flac")
mimetypes.add_type("video/webm", ".webm")
mimetypes.add_type("audio/x-aiff", ".aiff")


def _thumb_url(state: ApiState, video_id: str) -> str | None:
    folder = state.settings.thumbs_dir / video_id
    first = next(iter(sorted(folder.glob("*.jpg"))), None) if folder.is_dir() else None
    return f"/thumbs/{quote(video_id)}/{first.name}" if first else None


def _video_out(state: ApiState, r: VideoRecord) -> dict:
    return dict(video_id=r.video_id, title=file_title(r.source, r.metadata), source=state.shown(r.source),
                duration=r.duration,
                language=r.language, segments=r.segments, indexed_at=r.indexed_at,
                has_video=bool(r.probe.get("has_video")), has_audio=bool(r.probe.get("has_audio", True)),
                media_url=f"/media/{quote(r.video_id)}",
                thumbnail_url=_thumb_url(state, r.video_id), on_disk=os.path.exists(r.source), metadata=r.metadata)


def _record(state: ApiState, video_id: str) -> VideoRecord:
    record = state.archive.video(video_id)
    if record is None:
        raise ApiError(404, f"no video with id {video_id!r} in the index")
    return record


def transcript(state: ApiState, record: VideoRecord, track: int | None = None) -> list[TranscriptLine]:
    hits = [hit_from_payload(p, 0.0) for p in _speech(state, record, track)]
    return [TranscriptLine(start=h.start, end=h.end, text=h.text, language=h.language, speaker=h.speaker)
            for h in hits]


@router.get("/videos", response_model=list[VideoOut])
def list_videos(request: Request) -> list[VideoOut]:
    """Every indexed file, by path."""
    state = get_state(request)
    return [VideoOut(**_video_out(state, r)) for r in state.archive.files()]


@router.get("/library", response_model=LibraryOut)
def library(request: Request, offset: int = Query(0, ge=0, le=10_000_000),
            limit: int = Query(24, ge=1, le=200),
            where: Annotated[list[str] | None, Query(max_length=20, description=(
                "Only files whose metadata has this value: KEY=VALUE (tags=physics), as search takes it"))] = None,
            ) -> LibraryOut:
    """The start page: one page of files (with segments per kind), the index's size and example queries."""
    from mediaindex.api.library import example_queries, kind_counts

    state = get_state(request)
    store = state.index.store
    records = state.index.catalog.all()
    if where:
        try:
            pairs = parse_where(where)
        except ValueError as exc:
            raise ApiError(422, str(exc)) from exc
        records = [r for r in records if metadata_matches(r.metadata, pairs)]
    page = [LibraryVideoOut(**_video_out(state, r), kinds=kind_counts(store, r.video_id))
            for r in records[offset:offset + limit]]
    segments = sum(r.segments for r in records) if where else store.count()
    return LibraryOut(files=len(records), segments=segments, duration=sum(r.duration or 0 for r in records),
                      offset=offset, limit=limit, videos=page, examples=example_queries(store, records),
                      keys_required=state.keys_required(), max_upload_bytes=state.settings.api.max_upload_bytes,
                      media_suffixes=sorted(MEDIA_SUFFIXES), fetch_urls=state.settings.api.fetch_urls)


@router.get("/videos/{video_id}", response_model=VideoDetail)
def video_detail(request: Request, video_id: str = VideoId) -> VideoDetail:
    """One file: probe data, duration, language, its transcript and the summary made at ingest."""
    state = get_state(request)
    record = _record(state, video_id)
    stored = state.archive.stored_summary(record.video_id)
    summary = None if stored is None or not stored.chapters else SummaryOut(
        text=stored.summary, model=stored.model,
        chapters=[ChapterOut(title=c.title, start=c.start, end=c.end, summary=c.summary) for c in stored.chapters])
    return VideoDetail(**_video_out(state, record), probe=state.shown(record.probe), transcript=transcript(state, record),
                       summary=summary)


@router.delete("/videos/{video_id}", response_model=VideoOut)
def remove_video(request: Request, video_id: str = VideoId) -> VideoOut:
    """Take a file out of the index: its segments, summary, chapters and thumbnails. An uploaded file is
    deleted with it; a file in the media roots stays where it is. A file an ingest is indexing at that
    moment comes back when that ingest writes it."""
    state = get_state(request)
    record = _record(state, video_id)
    removed = VideoOut(**{**_video_out(state, record), "thumbnail_url": None})
    state.archive.remove([record.video_id])
    return removed


@router.get("/videos/{video_id}/transcript", response_model=list[TranscriptLine],
            responses={200: {"content": {"application/x-subrip": {}, "text/vtt": {}, "text/plain": {},
                                         "text/tab-separated-values": {}}}})
def video_transcript(request: Request, video_id: str = VideoId,
                     format: Literal["json", "srt", "vtt", "txt", "tsv"] = Query("json"),  # noqa: A002
                     max_line_width: int = Query(42, ge=10, le=1000, description="Subtitle line width in columns "
                                                 "(srt, vtt; a CJK character takes two)"),
                     max_line_count: int = Query(2, ge=1, le=1000, description="Lines per subtitle cue (srt, vtt)"),
                     offset: float = Query(0.0, ge=0, le=1e7, description="Seconds taken off every time, earlier "
                                           "lines left out (srt, vtt, txt, tsv): captions for a copy of the file "
                                           "that starts there (/media/{video_id}/playable?start=)"),
                     track: int | None = Query(None, ge=1, le=64, description="An audio track by its number (1, 2, "
                                               "… in the file's order) for a file with several; default: the "
                                               "default track")):
    """The transcript as JSON lines (with speakers), SRT or WebVTT subtitles, plain text or TSV."""
    from mediaindex.index.transcript import CueLimits, export, shifted

    state = get_state(request)
    record = _record(state, video_id)
    if format == "json":
        return transcript(state, record, track)
    segments = _speech(state, record, track)
    if offset:
        segments = shifted(segments, offset)
    text = export(segments, format, {}, CueLimits(max_line_width=max_line_width, max_line_count=max_line_count))
    stem = Path(record.source).stem.encode("ascii", "replace").decode().replace('"', "_") or "transcript"
    headers = {"Content-Disposition": f'inline; filename="{stem}.{format}"'}
    return PlainTextResponse(text, media_type=_TRANSCRIPT_TYPES[format], headers=headers)


def _speech(state: ApiState, record: VideoRecord, track: int | None) -> list[dict]:
    try:
        return state.archive.speech(record.video_id, track)
    except MediaIndexError as exc:  # a track the file lacks or that was not transcribed
        raise ApiError(422, str(exc)) from None


_TRANSCRIPT_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt", "txt": "text/plain",
                     "tsv": "text/tab-separated-values"}


def check_range(request: Request, path: Path) -> None:
    """A Range header FileResponse would refuse is answered here, as JSON: 400 malformed, 416 past the end."""
    header = request.headers.get("range")
    if header is None:
        return
    size = path.stat().st_size
    try:
        FileResponse._parse_range_header(header, size)
    except MalformedRangeHeader as exc:
        raise ApiError(400, f"the Range header is malformed ({exc}): use e.g. 'bytes=0-1023'") from exc
    except RangeNotSatisfiable as exc:
        raise ApiError(416, f"the range lies outside the file's {size} bytes",
                       headers={"Content-Range": f"bytes */{size}"}) from exc


def _file_response(request: Request, path: Path, media_type: str | None = None,
                   headers: dict[str, str] | None = None) -> FileResponse:
    check_range(request, path)
    media_type = media_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    # FileResponse answers Range requests with 206 and Accept-Ranges: bytes, so browsers can seek.
    return FileResponse(path, media_type=media_type, content_disposition_type="inline", filename=path.name,
                        headers=headers)


@router.get("/media/{video_id}", response_class=FileResponse,
            responses={200: _MEDIA_RESPONSE, 206: _MEDIA_RESPONSE, 400: {"model": ErrorOut}, 403: {"model": ErrorOut},
                       416: {"model": ErrorOut}})
def media(request: Request, video_id: str = VideoId) -> FileResponse:
    """The indexed media file, if it lies under a configured media root."""
    state = get_state(request)
    return _file_response(request, _served(state, _record(state, video_id)))


def _served(state: ApiState, record: VideoRecord) -> Path:
    """The indexed file's real path, where the server may serve it."""
    path = Path(record.source)
    if not path.exists():
        raise ApiError(404, f"the file of video {record.video_id!r} is no longer on disk")
    if not state.roots.contains(path):
        raise ApiError(403, f"the file of video {record.video_id!r} is outside the configured media roots")
    real = path.resolve()
    if not real.is_file() or state.media.refusal(path, real, known=True) is not None:
        raise ApiError(404, f"the file of video {record.video_id!r} is not served")
    return real


def _audio_stream(record: VideoRecord, track: int | None) -> int | None:
    """The audio stream a copy of the file takes (`probe.copied_track`)."""
    try:
        return copied_track(record.probe.get("audio_tracks") or [], bool(record.probe.get("has_audio")), track)
    except ValueError as exc:
        raise ApiError(422, f"{Path(record.source).name}: {exc}") from None


TRACK_DOC = ("The audio track to hear, by its number (1, 2, … in the file's order) for a file with several: a "
             "moment heard on it (a hit's `track`); default: the default track")

# Cutting re-encodes: at most this many at once, the rest are asked to come back.
_CUTTING = threading.BoundedSemaphore(2)


@router.get("/media/{video_id}/clip", response_class=FileResponse, responses={
    200: {"content": {"video/mp4": {}, "audio/mp4": {}}, "description": "The moment as a file of its own"},
    403: {"model": ErrorOut}, 422: {"model": ErrorOut}, 503: {"model": ErrorOut}})
def media_clip(request: Request, video_id: str = VideoId,
               start: float = Query(ge=0, le=1e7, description="Seconds from the start of the file"),
               end: float = Query(ge=0, le=1e7, description="Seconds from the start of the file (held to its end)"),
               track: int | None = Query(None, ge=1, le=64, description=TRACK_DOC),
               ) -> FileResponse:
    """A moment of the file as a download: MP4 (H.264 + AAC) with video, M4A for sound alone; at most ten
    minutes, cut exactly (re-encoded)."""
    state = get_state(request)
    record = _record(state, video_id)
    real = _served(state, record)
    has_video = bool(record.probe.get("has_video"))
    try:
        start, end = check_span(start, end, record.duration)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc
    audio = _audio_stream(record, track)
    if not _CUTTING.acquire(blocking=False):
        raise ApiError(503, "two clips are being cut: try again in a few seconds", headers={"Retry-After": "5"})
    try:
        state.settings.temp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="clip-", suffix=clip_suffix(has_video), dir=state.settings.temp_dir)
        os.close(fd)
        out = Path(name)
        try:
            cut(real, start, end, out, has_video, audio)
        except MediaError as exc:
            raise ApiError(422, exc.reason) from exc
    finally:
        _CUTTING.release()
    return FileResponse(out, media_type="video/mp4" if has_video else "audio/mp4",
                        filename=clip_name(record.source, start, end, has_video),
                        background=BackgroundTask(out.unlink, missing_ok=True))


# Copies being played (ffmpeg processes): each takes up to a core while it runs ahead of the player.
_PLAYING: set[asyncio.subprocess.Process] = set()
MAX_PLAYING = 3
_CHUNK = 64 * 1024


def _stop(proc: asyncio.subprocess.Process) -> None:
    _PLAYING.discard(proc)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            proc.kill()


@router.get("/media/{video_id}/playable", response_class=StreamingResponse, responses={
    200: {"content": {"video/mp4": {}, "audio/mp4": {}},
          "description": "Fragmented MP4 from `start` to the file's end, made as it is read"},
    403: {"model": ErrorOut}, 422: {"model": ErrorOut}, 503: {"model": ErrorOut}})
async def media_playable(request: Request, video_id: str = VideoId,
                         start: float = Query(0.0, ge=0, le=1e7, description="Seconds from the start of the file"),
                         track: int | None = Query(None, ge=1, le=64, description=TRACK_DOC),
                         ) -> StreamingResponse:
    """The file re-encoded as it is read, from `start` on (H.264 + AAC in fragmented MP4; AAC for sound alone):
    for files whose format browsers do not play (AVI, WMV, FLV, MPEG streams, AIFF, WMA, HEVC, ...), and to hear
    another audio track than the default one (browsers play the default). Seeking elsewhere is another request;
    nothing is kept once the reader goes."""
    state = get_state(request)
    record = _record(state, video_id)
    real = _served(state, record)
    if record.duration is not None and start >= record.duration:
        raise ApiError(422, f"start {start:g} s is after the file ends ({record.duration:g} s)")
    audio = _audio_stream(record, track)
    if sum(p.returncode is None for p in _PLAYING) >= MAX_PLAYING:
        raise ApiError(503, f"{MAX_PLAYING} files are being converted for playing: try again in a few seconds",
                       headers={"Retry-After": "5"})
    has_video = bool(record.probe.get("has_video"))
    # ffmpeg's complaints go to a file (a pipe left unread could fill and stall it), read if it fails at once.
    with tempfile.TemporaryFile() as said:
        proc = await asyncio.create_subprocess_exec(*playable.command(real, start, has_video, audio),
                                                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                    stderr=said)
        _PLAYING.add(proc)
        out = proc.stdout
        assert out is not None
        try:
            first = await out.read(_CHUNK)  # a file ffmpeg cannot read fails here, as an error of its own
            if not first:
                await proc.wait()
                said.seek(0)
                lines = said.read().decode(errors="replace").strip().splitlines()
                raise ApiError(422, "the file could not be converted for playing: "
                                    f"{lines[-1] if lines else 'ffmpeg wrote nothing'}")
        except BaseException:
            _stop(proc)
            raise

    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            while chunk := await out.read(_CHUNK):
                yield chunk
        finally:
            _stop(proc)  # the reader went (or the server stops)
            with anyio.CancelScope(shield=True):
                await proc.wait()

    stream = body()
    weakref.finalize(stream, _stop, proc)  # a reader gone before the body started: the stream is never run
    return StreamingResponse(stream, media_type=playable.media_type(has_video), headers={"Cache-Control": "no-store"})


@router.get("/files/{path:path}", response_class=FileResponse, responses={
    200: _MEDIA_RESPONSE, 206: _MEDIA_RESPONSE, 400: {"model": ErrorOut}, 403: {"model": ErrorOut},
    416: {"model": ErrorOut}})
def media_file(request: Request, path: str) -> FileResponse:
    """A media file by its path relative to a media root: only media (by type, or files the index knows),
    never hidden files or the index's own files."""
    state = get_state(request)
    real = state.media.resolve(path, known=lambda p: state.index.catalog.by_source(str(p)) is not None)
    return _file_response(request, real)


@router.get("/thumbs/{path:path}", response_class=FileResponse, responses={
    200: {"content": {"image/jpeg": {}}}, 206: {"content": {"image/jpeg": {}}}, 400: {"model": ErrorOut},
    403: {"model": ErrorOut}, 416: {"model": ErrorOut}})
def thumbnail(request: Request, path: str) -> FileResponse:
    """A thumbnail, by the relative path that hits carry in `thumbnail`."""
    real = get_state(request).thumb_files.resolve(path)
    media_type = "image/webp" if real.suffix.lower() == ".webp" else "image/jpeg"
    return _file_response(request, real, media_type=media_type, headers={"Cache-Control": "max-age=3600"})
