"""What to do with each file of a job, decided before anything runs, as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from mediaindex.agents.stored import SUMMARY
from mediaindex.config import Settings
from mediaindex.index.catalog import VideoRecord, content_hash
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.jobs import JobFile
from mediaindex.media.subtitles import subtitle_signature
from mediaindex.segments import ANALYSIS_ADDS

# Said of an unchanged file that an earlier version of the stages indexed.
EARLIER_ANALYSIS = f"already indexed, by an earlier version (--reindex indexes it again: {ANALYSIS_ADDS})"


class Outcome(StrEnum):
    NEW = "new"  # not indexed (or changed since, or re-indexed on request): through every stage
    NEEDS_SUMMARY = "needs summary"  # indexed and unchanged, without a summary: from the summary stage on
    UNCHANGED = "unchanged"  # indexed and unchanged: nothing to do
    MOVED = "moved"  # indexed from a path where it no longer is: its entry follows it, nothing runs
    NEW_METADATA = "new metadata"  # indexed and unchanged, given other metadata values: set in place, nothing runs
    POISON = "poison"  # the whole run died during its work on every try: given up
    UNREADABLE = "unreadable"  # cannot even be looked at: skipped


@dataclass(frozen=True)
class Plan:
    path: str
    outcome: Outcome
    meta: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0  # runs that died while a stage worked on it
    video_id: str | None = None  # NEEDS_SUMMARY, MOVED: the indexed file
    reason: str = ""

    @property
    def runs(self) -> bool:
        return self.outcome in (Outcome.NEW, Outcome.NEEDS_SUMMARY)


def plan_file(f: JobFile, index: MediaIndex, settings: Settings) -> Plan:
    """A job file's plan. An open file is charged an attempt each time a run crashed while a stage worked on it."""
    if f.state in ("pending", "running") and f.attempts > settings.ingest.max_retries:
        return Plan(f.path, Outcome.POISON, f.meta, f.attempts,
                    reason=f"gave up after {f.attempts} attempts (the run crashed while working on it)")
    try:
        unchanged = _unchanged(index, Path(f.path))
    except OSError as exc:
        return Plan(f.path, Outcome.UNREADABLE, f.meta, f.attempts, reason=f"cannot read: {exc.strerror or exc}")
    if settings.ingest.reindex:
        return Plan(f.path, Outcome.NEW, f.meta, f.attempts)
    indexed = index.catalog.by_source(f.path)
    if indexed is None:
        try:
            same = _same_bytes_elsewhere(index, Path(f.path))
        except OSError as exc:
            return Plan(f.path, Outcome.UNREADABLE, f.meta, f.attempts, reason=f"cannot read: {exc.strerror or exc}")
        if same is not None and Path(same.source).exists():
            return Plan(f.path, Outcome.UNCHANGED, f.meta, f.attempts, reason=f"same content as {same.source}")
        if same is not None:
            return Plan(f.path, Outcome.MOVED, f.meta, f.attempts, video_id=same.video_id,
                        reason=f"moved from {same.source}")
    if not unchanged:
        return Plan(f.path, Outcome.NEW, f.meta, f.attempts)
    if settings.ingest.summaries and indexed is not None and _needs_summary(index, indexed):
        return Plan(f.path, Outcome.NEEDS_SUMMARY, f.meta, f.attempts, video_id=indexed.video_id)
    # Keys a job does not give (none, for a folder's walk) keep what an earlier job gave.
    if indexed is not None and any(indexed.metadata.get(k) != v for k, v in f.meta.items()):
        changed = ", ".join(k for k, v in f.meta.items() if indexed.metadata.get(k) != v)
        return Plan(f.path, Outcome.NEW_METADATA, f.meta, f.attempts, video_id=indexed.video_id,
                    reason=f"already indexed; its metadata updated ({changed})")
    if indexed is not None and indexed.by_earlier_analysis():
        return Plan(f.path, Outcome.UNCHANGED, f.meta, f.attempts, reason=EARLIER_ANALYSIS)
    return Plan(f.path, Outcome.UNCHANGED, f.meta, f.attempts, reason="already indexed")


def _unchanged(index: MediaIndex, path: Path) -> bool:
    """Same size and mtime as when indexed, or the same bytes (then the mtime is refreshed), and the same
    subtitle files beside it."""
    catalog = index.catalog
    record = catalog.by_source(str(path))
    if record is None:
        return False
    if (record.probe.get("subtitle_files") or []) != subtitle_signature(path):
        return False
    stat = path.stat()
    if record.size == stat.st_size and record.mtime_ns == stat.st_mtime_ns:
        return True
    if record.size == stat.st_size and content_hash(path) == record.content_hash:
        catalog.touch(str(path), stat.st_size, stat.st_mtime_ns)
        return True
    return False


def _same_bytes_elsewhere(index: MediaIndex, path: Path) -> VideoRecord | None:
    """The indexed file of another path with these bytes (a copy, or this file before it moved), if any. Only
    files of the same size are compared, so a new file is read here only when one of them has its size."""
    others = index.catalog.of_size(path.stat().st_size)
    if not others:
        return None
    digest = content_hash(path)
    return next((r for r in others if r.content_hash == digest and r.source != str(path)), None)


def _needs_summary(index: MediaIndex, record: VideoRecord) -> bool:
    """Indexed with something to summarise but without a stored summary (a `summary` segment)."""
    return record.segments > 0 and index.store.count(SearchFilters(video_id=record.video_id, modality=SUMMARY)) == 0
