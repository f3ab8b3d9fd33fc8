"""The index writes of an ingest: a file's item becomes its catalog record and segments, or only its new
summary and chapter segments for a file indexed before."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from mediaindex.index.catalog import VideoRecord, now
from mediaindex.index.index import MediaIndex
from mediaindex.media.thumbnails import save_thumbnails
from mediaindex.pipeline.stages.item import MediaItem
from mediaindex.segments import (
    ANALYSIS_VERSION,
    GENERATED_MODALITIES,
    given_metadata,
    mark_chapters,
)


class Status(StrEnum):
    INDEXED = "indexed"
    SUMMARISED = "summarised"  # indexed earlier, its summary added now
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class FileOutcome:
    path: str
    status: Status
    reason: str = ""
    segments: int = 0
    video_id: str | None = None
    notes: list[str] = field(default_factory=list)
    duration: float = 0.0


def write_item(index: MediaIndex, item: MediaItem, meta: dict[str, Any]) -> FileOutcome:
    """Index a file: its record and every segment, replacing what an earlier version of it left."""
    duplicate = index.catalog.get(item.video_id)
    if duplicate is not None and duplicate.source != item.source and Path(duplicate.source).exists():
        return FileOutcome(item.source, Status.UNCHANGED, f"same content as {duplicate.source}",
                           video_id=item.video_id)
    if item.vectors is None or len(item.vectors) != len(item.segments):
        return FileOutcome(item.source, Status.FAILED, "internal error: segments were not embedded")
    # Indexed again (changed, or --reindex): what earlier jobs gave it stays, under what this one gives.
    earlier = index.catalog.by_source(item.source)
    meta = given_metadata({**(earlier.metadata if earlier is not None else {}), **meta})
    for seg in item.segments:
        # Per-file metadata from a manifest (title, tags, ...) is filterable payload; a stage's own keys win.
        seg.extra = {**meta, **seg.extra}
    mark_chapters(item.segments, item.info.chapters)  # a moment says the chapter it lies in
    record = VideoRecord(
        video_id=item.video_id, source=item.source, content_hash=item.content_hash, size=item.size,
        mtime_ns=item.mtime_ns, duration=item.info.duration, language=item.language,
        segments=len(item.segments), probe=item.info.to_dict(), indexed_at=now(),
        analysis=ANALYSIS_VERSION, metadata=meta,
    )
    save_thumbnails(index.thumbs_dir, item.thumbnail_files)  # before the segments that name them
    index.replace_video(record, item.segments, item.vectors)
    return FileOutcome(item.source, Status.INDEXED, segments=len(item.segments), video_id=item.video_id,
                       notes=item.notes, duration=item.info.duration)


def write_move(index: MediaIndex, path: str, video_id: str | None, meta: dict[str, Any],
               reason: str) -> FileOutcome:
    """Point the entry of a file indexed at another path, where it no longer is, at this one: the same bytes
    keep their segments, summary and thumbnails, and get the metadata values its job gives."""
    assert video_id is not None
    try:
        mtime_ns = Path(path).stat().st_mtime_ns
    except OSError as exc:
        return FileOutcome(path, Status.FAILED, f"cannot read: {exc.strerror or exc}", video_id=video_id)
    index.move_video(video_id, path, mtime_ns)
    if meta:
        index.add_metadata(video_id, meta)
    return FileOutcome(path, Status.UNCHANGED, f"{reason}; its segments follow it", video_id=video_id)


def write_metadata(index: MediaIndex, path: str, video_id: str | None, meta: dict[str, Any],
                   reason: str) -> FileOutcome:
    """Give an indexed, unchanged file the metadata its job gives it (a manifest row edited since); keys the job
    does not give keep their values."""
    assert video_id is not None
    index.add_metadata(video_id, meta)
    return FileOutcome(path, Status.UNCHANGED, reason, video_id=video_id)


def write_summary(index: MediaIndex, item: MediaItem, meta: dict[str, Any]) -> FileOutcome:
    """Add the summary and chapters of an indexed file; its other segments are left exactly as they are."""
    if item.summary_failure is not None:
        return FileOutcome(item.source, Status.FAILED, f"summary failed: {item.summary_failure}",
                           video_id=item.video_id)
    if item.vectors is None or len(item.vectors) != len(item.segments):
        return FileOutcome(item.source, Status.FAILED, "internal error: segments were not embedded",
                           video_id=item.video_id)
    new = [k for k, seg in enumerate(item.segments) if seg.modality in GENERATED_MODALITIES]
    if not new:
        return FileOutcome(item.source, Status.UNCHANGED, "already indexed; nothing to summarise",
                           video_id=item.video_id)
    segments = [item.segments[k] for k in new]
    earlier = index.catalog.get(item.video_id)
    kept = given_metadata({**(earlier.metadata if earlier is not None else {}), **meta})
    for seg in segments:
        seg.extra = {**kept, **seg.extra}  # filterable like the file's other segments
    index.add_segments(item.video_id, segments, item.vectors[new])
    if meta:  # and the file's other segments and entry get the values this job gives
        index.add_metadata(item.video_id, meta)
    return FileOutcome(item.source, Status.SUMMARISED, segments=len(segments), video_id=item.video_id,
                       notes=item.notes, duration=item.info.duration)
