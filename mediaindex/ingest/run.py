"""Ingest media as a persisted job: files stream through the stage actor pools; the driver writes the index.

Every stage is an ``ActorPool`` of Ray actors (``mediaindex.workers``). A stage's output stays in
Ray's object store and its reference is handed to the next stage, so audio and frames never pass
through the driver. Speech works on the file itself beside decode and vision, so transcribing never
waits for a file's pictures nor they for it; the transcript joins the item before it is embedded (or
summarised). Each actor holds one file at a time and at most ``ray.max_files_in_flight`` files are
between "decode started" and "written", which bounds memory: a fast stage cannot pile up work for a
slow one. The job's manifest and per-file states live in ``jobs.db`` beside the index, so a run
stopped by a crash, Ctrl-C or a killed worker continues with ``ingest(..., resume=JOB)``.

With summaries (``ingest.summaries``) every new file also passes the language stage. A file that is indexed and
unchanged but has no stored summary yet (indexed before summaries were on) is not decoded again: its segments
are read from the index and it enters the pipeline at the language stage; only its new summary and chapter
segments are written. A pipeline with a language stage also serves runs without summaries: they pass it by.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.agents.stored import SUMMARY
from mediaindex.config import Settings
from mediaindex.errors import MediaError, MediaIndexError
from mediaindex.index.catalog import Catalog, VideoRecord, content_hash, now
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.ingest.inputs import InputError, plan_inputs
from mediaindex.ingest.progress import IngestStats, StageStats
from mediaindex.jobs import JobStore
from mediaindex.segments import GENERATED_MODALITIES
from mediaindex.stages.item import MediaItem
from mediaindex.stages.summary import NO_SUMMARY, indexed_item
from mediaindex.workers.pool import Pipeline

log = logging.getLogger(__name__)

__all__ = ["FileOutcome", "IngestReport", "Pipeline", "ingest", "with_summaries"]

LANGUAGE = "language"  # the stage that summarises (mediaindex.workers.stages)


@dataclass
class FileOutcome:
    path: str
    status: str  # "indexed" | "summarised" (indexed earlier, summary added now) | "unchanged" | "failed" | "skipped"
    reason: str = ""
    segments: int = 0
    video_id: str | None = None
    notes: list[str] = field(default_factory=list)
    duration: float = 0.0


@dataclass
class IngestReport:
    job_id: str = ""
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
TickFn = Callable[[IngestStats], None]
DispatchFn = Callable[[str, str], None]  # (stage name, file path), right after the stage got the file


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


def with_summaries(settings: Settings, summaries: bool | None) -> Settings:
    """`settings` with ingest.summaries set as `ingest --summaries/--no-summaries` sets it; None keeps the config."""
    if summaries is None or summaries == settings.ingest.summaries:
        return settings
    return settings.model_copy(update={"ingest": settings.ingest.model_copy(update={"summaries": summaries})})


def _needs_summary(index: MediaIndex, record: VideoRecord) -> bool:
    """Indexed with something to summarise but without a stored summary (a `summary` segment)."""
    return record.segments > 0 and index.store.count(SearchFilters(video_id=record.video_id, modality=SUMMARY)) == 0


def _error_reason(exc: BaseException) -> str:
    """The user-facing reason inside a (possibly Ray-wrapped) exception."""
    cause = getattr(exc, "cause", None) or exc.__cause__ or exc
    if isinstance(cause, MediaError):
        return cause.reason
    if isinstance(cause, MediaIndexError):
        return str(cause)
    return f"{type(cause).__name__}: {cause}"


def _worker_lost(exc: BaseException) -> bool:
    """The worker died (crash, OOM kill, killed actor or node): worth another try; a stage error is not."""
    from ray import exceptions as rx

    return isinstance(exc, rx.RayActorError | rx.WorkerCrashedError | rx.ObjectLostError | rx.OutOfMemoryError
                      | rx.NodeDiedError)


@dataclass
class _File:
    path: str
    meta: dict[str, Any]
    attempts: int
    summary_of: str | None = None  # the video id of an indexed, unchanged file that only needs its summary
    line: list[int] = field(default_factory=list)  # the stages it passes one after another
    pos: int = 0  # its place on the line: the stage its next input goes to
    # The stages that work on the file itself beside the line (speech): stage -> its result's reference once
    # finished. Their results join the item before the first stage that `joins`, or when it is written.
    side: dict[int, Any] = field(default_factory=dict)
    joined: bool = False
    parked: Any = None  # a line result waiting for the side results before it goes on
    busy: list[tuple[int, float]] = field(default_factory=list)  # (stage, seconds) of this attempt

    @property
    def side_ready(self) -> bool:
        return all(ref is not None for ref in self.side.values())


class _Run:
    """One pass over a job's open files through the pipeline's stage pools."""

    def __init__(self, job_id: str, jobs: JobStore, settings: Settings, index: MediaIndex, pipeline: Pipeline,
                 stats: IngestStats, record: Callable[[FileOutcome], None],
                 on_tick: TickFn | None, on_dispatch: DispatchFn | None) -> None:
        self.job_id, self.jobs, self.settings, self.index, self.pipeline = job_id, jobs, settings, index, pipeline
        self.stats, self.record, self.on_tick, self.on_dispatch = stats, record, on_tick, on_dispatch
        # Per stage, the files waiting for one of its actors, each with its input (the path, or references to
        # earlier stages' results).
        self.waiting: list[deque[tuple[_File, tuple[Any, ...]]]] = [deque() for _ in pipeline.stages]
        self.running: dict[Any, tuple[_File, int, Any, float]] = {}  # ObjectRef -> (file, stage, actor, sent at)
        self.in_flight = 0
        # The stages a new file passes: a shared pipeline (the API's) has a language stage that runs without
        # summaries pass by. A file that only needs its summary starts at the language stage, with no side stages.
        names = [s.name for s in pipeline.stages]
        summaries = settings.ingest.summaries
        route = [k for k, name in enumerate(names) if name != LANGUAGE or summaries]
        self.side = [k for k in route if pipeline.stages[k].from_file]
        self.line = [k for k in route if not pipeline.stages[k].from_file]
        language = names.index(LANGUAGE) if summaries and LANGUAGE in names else None
        self.summary_line = [k for k in self.line if k >= language] if language is not None else []

    def run(self, todo: list[_File]) -> None:
        import ray

        pending = deque(todo)
        window = self.settings.ray.max_files_in_flight
        last_tick = 0.0
        try:
            while pending or self.in_flight:
                while pending and self.in_flight < window:
                    self._admit(pending.popleft())
                self._dispatch()
                refs = list(self.running)
                if not refs:  # every admitted file waits for an actor yet none is busy: a pool lost its actors
                    raise RuntimeError("ingest stalled: no stage actor is available")
                ready, rest = ray.wait(refs, num_returns=1, timeout=0.5, fetch_local=False)
                if ready and rest:  # collect everything else that is already done too
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)
                    ready += more
                for ref in ready:
                    if ref in self.running:  # not dropped meanwhile with its file
                        self._finished(ref)
                self._check_timeouts()
                if self.on_tick and time.monotonic() - last_tick >= 1.0:
                    last_tick = time.monotonic()
                    self.on_tick(self.stats)
        finally:
            self._release()
        if self.on_tick:
            self.on_tick(self.stats)

    def _admit(self, f: _File) -> None:
        f.attempts += 1
        f.busy = []
        self.jobs.set_file(self.job_id, f.path, "running", attempt=True)
        self.in_flight += 1
        try:
            f.line, first_input = self._start(f)
        except Exception as exc:  # e.g. the index cannot be read: this file fails, the run goes on
            self._close(f, FileOutcome(f.path, "failed", _error_reason(exc), video_id=f.summary_of))
            return
        f.pos, f.joined, f.parked = 0, False, None
        f.side = {} if f.summary_of else dict.fromkeys(self.side)
        for k in f.side:
            self.waiting[k].append((f, (f.path,)))
        self._forward(f, first_input)

    def _start(self, f: _File) -> tuple[list[int], Any]:
        """A file's line and first input: a new file's path for decode, or for a file that only needs its
        summary, the line from the language stage and the file as indexed (read here, when it is admitted,
        to bound memory)."""
        if f.summary_of is None:
            return self.line, f.path
        if not self.summary_line:
            raise MediaIndexError("the pipeline has no language stage to summarise with (ingest.summaries)")
        return self.summary_line, indexed_item(self.index, f.summary_of)

    def _forward(self, f: _File, x: Any) -> None:
        """Send `x` (the first input, or the reference to the last line stage's result) on along the line."""
        if f.pos == len(f.line):
            if f.side_ready:
                self._finish(f, x, [] if f.joined else list(f.side.values()))
            else:
                f.parked = x
            return
        k = f.line[f.pos]
        if self.pipeline.stages[k].joins and f.side and not f.joined:
            if not f.side_ready:
                f.parked = x
                return
            f.joined = True
            self.waiting[k].append((f, (x, *f.side.values())))
        else:
            self.waiting[k].append((f, (x,)))

    def _dispatch(self) -> None:
        # Later stages first: finishing files frees memory before new ones are decoded.
        for k in reversed(range(len(self.waiting))):
            queue, pool = self.waiting[k], self.pipeline.pools[k]
            while queue and pool.has_free():
                f, args = queue.popleft()
                actor = pool.pop_idle()
                ref = actor.process.remote(*args)
                self.running[ref] = (f, k, actor, time.monotonic())
                if self.on_dispatch:
                    self.on_dispatch(self.pipeline.stages[k].name, f.path)

    def _finished(self, ref: Any) -> None:
        f, k, actor, t0 = self.running.pop(ref)
        self.pipeline.pools[k].push(actor)
        f.busy.append((k, time.monotonic() - t0))
        # Errors travel with the references and surface at the end, in one place.
        if k in f.side:
            f.side[k] = ref
            if f.parked is not None and f.side_ready:
                parked, f.parked = f.parked, None
                self._forward(f, parked)
            return
        f.pos += 1
        self._forward(f, ref)

    def _finish(self, f: _File, ref: Any, side: list[Any]) -> None:
        import ray

        try:
            item: MediaItem = ray.get(ref)
            for result in ray.get(side):
                item = result.join(item)
        except Exception as exc:
            self._failed_attempt(f, exc)
            return
        outcome = _write_summary(self.index, item, f.meta) if f.summary_of else _write(self.index, item, f.meta)
        if outcome.status == "failed":
            self._close(f, outcome)
            return
        for stage, seconds in f.busy:
            self.stats.stages[stage].files += 1
            self.stats.stages[stage].busy += seconds
            self.stats.stages[stage].media += outcome.duration
        self.stats.media += outcome.duration
        self._close(f, outcome)

    def _failed_attempt(self, f: _File, exc: BaseException) -> None:
        reason = _error_reason(exc)
        if _worker_lost(exc):
            # Ray already re-ran the lost call on the restarted actor ray.max_task_retries times.
            reason = f"worker died ({self.pipeline.settings.ingest.max_retries} retries): {reason}"
        self._close(f, FileOutcome(f.path, "failed", reason, video_id=f.summary_of))

    def _check_timeouts(self) -> None:
        import ray

        limit = self.settings.ingest.file_timeout
        now_ = time.monotonic()
        for ref, (f, k, actor, t0) in list(self.running.items()):
            if ref not in self.running or now_ - t0 <= limit:
                continue
            del self.running[ref]
            # A running call on a synchronous actor cannot be interrupted: restart the actor instead.
            ray.cancel(ref)
            ray.kill(actor, no_restart=False)
            self.pipeline.pools[k].push(actor)
            self._drop(f)
            self._close(f, FileOutcome(f.path, "failed",
                                       f"timed out after {limit:g} s in the {self.pipeline.stages[k].name} stage",
                                       video_id=f.summary_of))

    def _drop(self, f: _File) -> None:
        """Forget the file's other work: calls beside a failed one and its places in the queues."""
        import ray

        for ref, (other, k, actor, _) in list(self.running.items()):
            if other is f:
                del self.running[ref]
                ray.cancel(ref)
                self.pipeline.pools[k].push(actor)
        for queue in self.waiting:
            kept = [(g, args) for g, args in queue if g is not f]
            queue.clear()
            queue.extend(kept)

    def _close(self, f: _File, outcome: FileOutcome) -> None:
        self.in_flight -= 1
        state = "failed" if outcome.status == "failed" else "done"
        self.jobs.set_file(self.job_id, f.path, state, outcome.reason, video_id=outcome.video_id)
        if state == "failed":
            self.stats.failed += 1
        else:
            self.stats.done += 1
        self.record(outcome)

    def _release(self) -> None:
        """On the way out (normal or not), give every busy actor back and drop queued work."""
        import ray

        for ref, (_, k, actor, _) in self.running.items():
            ray.cancel(ref)
            self.pipeline.pools[k].push(actor)
        self.running.clear()


def _write(index: MediaIndex, item: MediaItem, meta: dict[str, Any]) -> FileOutcome:
    duplicate = index.catalog.get(item.video_id)
    if duplicate is not None and duplicate.source != item.source and Path(duplicate.source).exists():
        return FileOutcome(item.source, "unchanged", f"same content as {duplicate.source}", video_id=item.video_id)
    if item.vectors is None or len(item.vectors) != len(item.segments):
        return FileOutcome(item.source, "failed", "internal error: segments were not embedded")
    for seg in item.segments:
        # Per-file metadata from a manifest (title, tags, ...) is filterable payload; a stage's own keys win.
        seg.extra = {**meta, **seg.extra}
    record = VideoRecord(
        video_id=item.video_id, source=item.source, content_hash=item.content_hash, size=item.size,
        mtime_ns=item.mtime_ns, duration=item.info.duration, language=item.language,
        segments=len(item.segments), probe=item.info.to_dict(), indexed_at=now(),
    )
    index.replace_video(record, item.segments, item.vectors)
    return FileOutcome(item.source, "indexed", segments=len(item.segments), video_id=item.video_id,
                       notes=item.notes, duration=item.info.duration)


def _write_summary(index: MediaIndex, item: MediaItem, meta: dict[str, Any]) -> FileOutcome:
    """Add the summary and chapters of an indexed file; its other segments are left exactly as they are."""
    failed = [n.removeprefix(NO_SUMMARY) for n in item.notes if n.startswith(NO_SUMMARY)]
    if failed:
        return FileOutcome(item.source, "failed", f"summary failed: {failed[0]}", video_id=item.video_id)
    if item.vectors is None or len(item.vectors) != len(item.segments):
        return FileOutcome(item.source, "failed", "internal error: segments were not embedded",
                           video_id=item.video_id)
    new = [k for k, seg in enumerate(item.segments) if seg.modality in GENERATED_MODALITIES]
    if not new:
        return FileOutcome(item.source, "unchanged", "already indexed; nothing to summarise", video_id=item.video_id)
    segments = [item.segments[k] for k in new]
    for seg in segments:
        seg.extra = {**meta, **seg.extra}  # filterable like the file's other segments written by this job
    index.add_segments(item.video_id, segments, item.vectors[new])
    return FileOutcome(item.source, "summarised", segments=len(segments), video_id=item.video_id, notes=item.notes,
                       duration=item.info.duration)


def jobs_store(settings: Settings) -> JobStore:
    """The job records of an index live beside it."""
    return JobStore.of(settings)


def create_job(jobs: JobStore, settings: Settings, paths: Sequence[str | Path] = (), manifests: Sequence[Path] = (),
               include: Sequence[str] = (), exclude: Sequence[str] = ()) -> str:
    """Expand the inputs into a persisted manifest (nothing runs yet); returns the job id."""
    plan = plan_inputs(paths, manifests, include, exclude)
    params = {
        "paths": [str(p) for p in paths], "manifests": [str(m) for m in manifests],
        "include": list(include), "exclude": list(exclude), "index_dir": str(settings.index_dir),
        "summaries": settings.ingest.summaries,
    }
    files = plan.files + [(path, {}) for path, _ in plan.skipped]
    job = jobs.create("ingest", params, files=files)
    for path, reason in plan.skipped:
        jobs.set_file(job.id, path, "skipped", reason)
    return job.id


def ingest(
    paths: Sequence[str | Path],
    settings: Settings,
    index: MediaIndex,
    pipeline: Pipeline | None = None,
    progress: ProgressFn | None = None,
    on_plan: Callable[[int], None] | None = None,
    *,
    manifests: Sequence[Path] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    resume: str | None = None,
    jobs: JobStore | None = None,
    on_tick: TickFn | None = None,
    on_dispatch: DispatchFn | None = None,
    on_job: Callable[[str], None] | None = None,
    finish_job: bool = True,
) -> IngestReport:
    """Run a new ingest job over paths/manifests, or continue job `resume`; returns this run's outcomes.

    With finish_job=False a run that completes leaves the job "running": the caller records its end with its own
    result (the API's job runner), so nobody sees the job done before its result is there."""
    own_jobs = jobs is None
    jobs = jobs or jobs_store(settings)
    try:
        report = _ingest(paths, settings, index, pipeline, progress, on_plan, manifests, include, exclude, resume,
                         jobs, on_tick, on_dispatch, on_job)
        if finish_job:
            jobs.set_state(report.job_id, "done", result=jobs.counts(report.job_id))
        return report
    finally:
        if own_jobs:
            jobs.close()


def _ingest(paths, settings, index, pipeline, progress, on_plan, manifests, include, exclude, resume, jobs,
            on_tick, on_dispatch, on_job) -> IngestReport:
    if resume:
        job = jobs.get(resume)
        if job.kind != "ingest":
            raise InputError(f"job {resume} is a {job.kind} job, not an ingest job")
        if job.params.get("index_dir", str(settings.index_dir)) != str(settings.index_dir):
            raise InputError(f"job {resume} writes to the index at {job.params.get('index_dir')}; "
                             f"resume it with --index {job.params.get('index_dir')}")
        job_id = resume
        new_skips: list = []
        # The summaries a job was started with are part of its work: a resume finishes them.
        settings = with_summaries(settings, True) if job.params.get("summaries") else settings
    else:
        job_id = create_job(jobs, settings, paths, manifests, include, exclude)
        new_skips = jobs.files(job_id, states=("skipped",))
    if on_job:
        on_job(job_id)
    report = IngestReport(job_id=job_id)

    def record(outcome: FileOutcome) -> None:
        report.outcomes.append(outcome)
        if progress:
            progress(outcome)

    for f in new_skips:
        record(FileOutcome(f.path, "skipped", f.reason))
    todo: list[_File] = []
    for f in jobs.files(job_id, states=("pending", "running")):
        if f.state == "running" and f.attempts > settings.ingest.max_retries:
            # The whole run stopped while this file was in progress, again and again: a poison file.
            reason = f"gave up after {f.attempts} attempts (the run stopped while it was in progress)"
            jobs.set_file(job_id, f.path, "failed", reason)
            record(FileOutcome(f.path, "failed", reason))
            continue
        try:
            if _unchanged(index.catalog, Path(f.path)):
                indexed = index.catalog.by_source(f.path)
                if settings.ingest.summaries and indexed is not None and _needs_summary(index, indexed):
                    todo.append(_File(f.path, f.meta, f.attempts, summary_of=indexed.video_id))
                    continue
                jobs.set_file(job_id, f.path, "done", "already indexed")
                record(FileOutcome(f.path, "unchanged", "already indexed"))
                continue
        except OSError as exc:
            reason = f"cannot read: {exc.strerror or exc}"
            jobs.set_file(job_id, f.path, "skipped", reason)
            record(FileOutcome(f.path, "skipped", reason))
            continue
        todo.append(_File(f.path, f.meta, f.attempts))
    if on_plan:
        on_plan(len(todo))
    jobs.set_state(job_id, "running")
    own_pipeline = pipeline is None and bool(todo)
    try:
        if todo:
            pipeline = pipeline or Pipeline(settings)
            stats = IngestStats(job_id, len(todo), [StageStats(s.name, s.workers) for s in pipeline.stages])
            _Run(job_id, jobs, settings, index, pipeline, stats, record, on_tick, on_dispatch).run(todo)
    except BaseException as exc:
        # Files caught in flight go back to pending: a resume picks them up (the catalog prevents doubles).
        for f in jobs.files(job_id, states=("running",)):
            jobs.set_file(job_id, f.path, "pending", "interrupted")
        interrupted = isinstance(exc, KeyboardInterrupt)
        jobs.set_state(job_id, "cancelled" if interrupted else "failed",
                       error="interrupted" if interrupted else _error_reason(exc))
        raise
    finally:
        if own_pipeline and pipeline is not None:
            pipeline.close()
    return report
