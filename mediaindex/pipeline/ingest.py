"""Ingest media files: decode -> speech -> vision -> embed on Ray actors, streamed; the driver writes the index."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mediaindex.workers  # noqa: F401  (sets Ray's auth environment before Ray is imported)
from mediaindex.config import Settings
from mediaindex.errors import MediaError, MediaIndexError
from mediaindex.index.catalog import Catalog, VideoRecord, content_hash, now
from mediaindex.index.index import MediaIndex
from mediaindex.pipeline.discover import discover
from mediaindex.pipeline.item import MediaItem

log = logging.getLogger(__name__)


@dataclass
class FileOutcome:
    path: str
    status: str  # "indexed" | "unchanged" | "failed" | "skipped"
    reason: str = ""
    segments: int = 0
    video_id: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class IngestReport:
    outcomes: list[FileOutcome] = field(default_factory=list)

    def by_status(self, status: str) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def indexed(self) -> list[FileOutcome]:
        return self.by_status("indexed")

    @property
    def failed(self) -> list[FileOutcome]:
        return self.by_status("failed") + self.by_status("skipped")


ProgressFn = Callable[[FileOutcome], None]


def _unchanged(catalog: Catalog, path: Path) -> bool:
    """Same size and mtime as when indexed, or the same bytes (then the mtime is refreshed)."""
    record = catalog.by_source(str(path))
    if record is None:
        return False
    stat = path.stat()
    if record.size == stat.st_size and record.mtime_ns == stat.st_mtime_ns:
        return True
    if record.size == stat.st_size and content_hash(path) == record.content_hash:
        catalog.touch(str(path), stat.st_size, stat.st_mtime_ns)
        return True
    return False


def _error_reason(exc: BaseException) -> str:
    """The user-facing reason inside a (possibly Ray-wrapped) exception."""
    cause = getattr(exc, "cause", None) or exc.__cause__ or exc
    if isinstance(cause, MediaError):
        return cause.reason
    if isinstance(cause, MediaIndexError):
        return str(cause)
    return f"{type(cause).__name__}: {cause}"


class Pipeline:
    """The stage actors, created once and reused across ingest calls."""

    def __init__(self, settings: Settings) -> None:
        from mediaindex.workers.actors import EmbedActor, SpeechActor, vision_actor
        from mediaindex.workers.runtime import ensure_ray

        ensure_ray(settings)
        self.settings = settings
        self.speech = [SpeechActor.remote(settings) for _ in range(settings.ray.speech_workers)]
        self.vision = [vision_actor(settings) for _ in range(settings.ray.vision_workers)] if settings.vision.enabled else []
        self.embed = [EmbedActor.remote(settings) for _ in range(settings.ray.embed_workers)]
        self._turn = 0

    def submit(self, path: Path):  # -> ray.ObjectRef[MediaItem]
        from mediaindex.workers.actors import decode_task

        self._turn += 1
        item = decode_task.remote(str(path), self.settings)
        item = self.speech[self._turn % len(self.speech)].process.remote(item)
        if self.vision:
            item = self.vision[self._turn % len(self.vision)].process.remote(item)
        return self.embed[self._turn % len(self.embed)].process.remote(item)

    def close(self) -> None:
        import ray

        for actor in self.speech + self.vision + self.embed:
            ray.kill(actor)


def ingest(
    paths: list[str | Path],
    settings: Settings,
    index: MediaIndex,
    pipeline: Pipeline | None = None,
    progress: ProgressFn | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> IngestReport:
    import ray

    report = IngestReport()

    def record(outcome: FileOutcome) -> None:
        report.outcomes.append(outcome)
        if progress:
            progress(outcome)

    found = discover(paths)
    todo: list[Path] = []
    for path, reason in found.skipped:
        record(FileOutcome(path, "skipped", reason))
    for path in found.files:
        try:
            if _unchanged(index.catalog, path):
                record(FileOutcome(str(path), "unchanged", "already indexed"))
                continue
        except OSError as exc:
            record(FileOutcome(str(path), "skipped", f"cannot read: {exc.strerror or exc}"))
            continue
        todo.append(path)
    if on_plan:
        on_plan(len(todo))
    if not todo:
        return report

    own_pipeline = pipeline is None
    pipeline = pipeline or Pipeline(settings)
    in_flight: dict = {}
    queue = list(todo)
    try:
        while queue or in_flight:
            while queue and len(in_flight) < settings.ray.max_files_in_flight:
                path = queue.pop(0)
                in_flight[pipeline.submit(path)] = path
            done, _ = ray.wait(list(in_flight), num_returns=1)
            path = in_flight.pop(done[0])
            try:
                item: MediaItem = ray.get(done[0])
            except Exception as exc:  # a stage failed for this file only
                record(FileOutcome(str(path), "failed", _error_reason(exc)))
                continue
            record(_write(index, item))
    finally:
        if own_pipeline:
            pipeline.close()
    return report


def _write(index: MediaIndex, item: MediaItem) -> FileOutcome:
    duplicate = index.catalog.get(item.video_id)
    if duplicate is not None and duplicate.source != item.source and Path(duplicate.source).exists():
        return FileOutcome(item.source, "unchanged", f"same content as {duplicate.source}", video_id=item.video_id)
    if item.vectors is None or len(item.vectors) != len(item.segments):
        return FileOutcome(item.source, "failed", "internal error: segments were not embedded")
    record = VideoRecord(
        video_id=item.video_id, source=item.source, content_hash=item.content_hash, size=item.size,
        mtime_ns=item.mtime_ns, duration=item.info.duration, language=item.language,
        segments=len(item.segments), probe=item.info.to_dict(), indexed_at=now(),
    )
    index.replace_video(record, item.segments, item.vectors)
    return FileOutcome(item.source, "indexed", segments=len(item.segments), video_id=item.video_id, notes=item.notes)
