"""Ingest media as a persisted job: plan each file, move the files through the stages, write the index.

`ingest(request, index, pipeline, hooks)` runs a new job or continues one. Its loop reads as the work does:
plan every file of the job (`plan.py`), then step the scheduler (`scheduler.py`: admit, dispatch what is
ready, collect what finished) and write each finished file (`write.py`) until none is left. The stages run
on an `Executor`: threads of this process (`inprocess.py`) or, chosen by the caller, Ray actor pools
(`mediaindex.workers`).

The job's manifest and per-file states live in ``jobs.db`` beside the index. A file is "running" from the
moment a stage starts work on it. A run that crashes (a fatal signal, which faulthandler records) while a stage
works on a file counts one attempt against that file; a run that is killed (SIGKILL, power loss) or stopped in
order (Ctrl-C, a cancel request) charges nothing: the files in flight go back to pending. A job whose process
is gone shows as interrupted; `ingest(..., resume=JOB)` continues where it stopped, and also redoes files the
job finished whose data the index no longer holds (a reset, a repair).

With summaries (``ingest.summaries``) every new file also passes the summary stage. A file that is indexed and
unchanged but has no stored summary yet is not decoded again: its segments are read from the index and it enters
the route at the summary stage; only its new summary and chapter segments are written. A pipeline with a summary
stage also serves runs without summaries: they pass it by.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.config import Settings
from mediaindex.errors import StageError, reason_of
from mediaindex.index.index import MediaIndex
from mediaindex.jobs import FileState, JobStore, crash_record, this_runner
from mediaindex.pipeline.executor import Executor
from mediaindex.pipeline.job import GLOBS_LEFT_OUT, create_job, jobs_store, resumable, with_choices
from mediaindex.pipeline.plan import Outcome, Plan, plan_file
from mediaindex.pipeline.progress import IngestStats, StageStats
from mediaindex.pipeline.request import IngestHooks, IngestReport, IngestRequest
from mediaindex.pipeline.route import FULL_ROUTE, Route
from mediaindex.pipeline.scheduler import Finished, Scheduler, SchedulerHooks
from mediaindex.pipeline.small import has_pictures
from mediaindex.pipeline.spec import StageSpec, default_stages
from mediaindex.pipeline.stages.merge import merge
from mediaindex.pipeline.stages.registry import StageName
from mediaindex.pipeline.stages.summary import indexed_item
from mediaindex.pipeline.write import (
    FileOutcome,
    Status,
    write_item,
    write_metadata,
    write_move,
    write_summary,
)

__all__ = ["FileOutcome", "IngestHooks", "IngestReport", "IngestRequest", "PipelineStarter", "StagePipeline", "Status",
           "create_job", "ingest", "jobs_store", "start_in_process", "with_choices"]

log = logging.getLogger(__name__)

RECORD_EVERY = 5.0  # seconds between the progress reports written to the job records (`jobs`, the API read them)


class StagePipeline(Protocol):
    """Stages started and ready to run: a `Pipeline` of Ray actors or an `InProcessPipeline`."""

    stages: list[StageSpec]

    def executor(self) -> Executor[Any]: ...

    def close(self) -> None: ...


PipelineStarter = Callable[[Settings, list[Plan]], StagePipeline]


def start_in_process(settings: Settings, todo: list[Plan], why: str = "") -> StagePipeline:
    """The stages on threads of this process. When every file was probed and none has pictures, the vision
    models are not loaded at all."""
    from mediaindex.pipeline.inprocess import InProcessPipeline

    stages = default_stages(settings)
    if not has_pictures(todo):
        stages = [s for s in stages if s.name is not StageName.VISION]
    log.info("ingest: %sthe stages (%s) run in this process, their models loading side by side",
             f"{why}: " if why else "", ", ".join(s.name.value for s in stages))
    return InProcessPipeline(settings, stages)


def ingest(request: IngestRequest, index: MediaIndex, pipeline: StagePipeline | None = None,
           hooks: IngestHooks | None = None, start: PipelineStarter = start_in_process) -> IngestReport:
    """Run a new ingest job over the request's inputs, or continue job `request.resume`; returns this run's
    outcomes. Without a pipeline, one is started for the run (when a file needs it) and closed after: on
    `start(settings, todo)`: by default on threads of this process; the service passes one that picks Ray for a
    large job (`mediaindex.service.start_pipeline`)."""
    jobs = request.jobs or jobs_store(request.settings)
    try:
        run = _Run(request, index, jobs, hooks or IngestHooks())
        run.execute(pipeline, start)
        if request.finish_job and not run.report.cancelled:
            jobs.set_state(run.job_id, "done", result=jobs.counts(run.job_id))
        return run.report
    finally:
        if request.jobs is None:
            jobs.close()


class _Run:
    """One pass over a job's open files."""

    def __init__(self, request: IngestRequest, index: MediaIndex, jobs: JobStore, hooks: IngestHooks) -> None:
        self.index, self.jobs, self.hooks = index, jobs, hooks
        if request.resume:
            self.settings = resumable(jobs, request.resume, request.settings)
            self.job_id = request.resume
            jobs.interrupted_work(self.job_id)  # a run that died: its files in flight are open again
            if jobs.get(self.job_id).state == "cancelled":  # resuming a cancelled job asks it to run again
                jobs.clear_cancel(self.job_id)
            skipped = []
        else:
            self.settings = request.settings
            self.job_id = create_job(jobs, self.settings, request.paths, request.manifests, request.include,
                                     request.exclude, request.given)
            skipped = jobs.files(self.job_id, states=("skipped",))
        hooks.on_job(self.job_id)
        self.report = IngestReport(job_id=self.job_id, left_out=jobs.get(self.job_id).params.get(GLOBS_LEFT_OUT, 0))
        for f in skipped:
            self._record(FileOutcome(f.path, Status.SKIPPED, f.reason))
        self.stats: IngestStats | None = None
        self.last_tick = self.last_record = 0.0

    def execute(self, pipeline: StagePipeline | None, start: PipelineStarter) -> None:
        todo = self.plan()
        self.hooks.on_plan(len(todo))
        self.jobs.set_state(self.job_id, "running")
        own = pipeline is None and bool(todo)
        try:
            if todo:
                pipeline = pipeline or start(self.settings, todo)
                with self._crash_record():
                    self.run(todo, pipeline)
        except BaseException as exc:
            self._stopped(exc)
            raise
        finally:
            if own and pipeline is not None:
                began = time.monotonic()
                pipeline.close()
                log.info("ingest: pipeline closed in %.1f s", time.monotonic() - began)

    @contextlib.contextmanager
    def _crash_record(self) -> Iterator[None]:
        """A fatal signal during the run (a decoder's segfault) leaves its traceback in a file beside the job
        records: the next run charges the files a stage was working on (a SIGKILL leaves the file empty)."""
        path = crash_record(self.jobs.path, this_runner())
        previous = faulthandler.is_enabled()
        with open(path, "w") as record:
            faulthandler.enable(record, all_threads=True)
            try:
                yield
            finally:
                faulthandler.disable()
                if previous:
                    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stderr without a descriptor
                        faulthandler.enable()
        path.unlink(missing_ok=True)

    def plan(self) -> list[Plan]:
        """Every open file's plan, and that of every finished one whose data the index lost (a reset, a repair);
        those with nothing to run are recorded at once."""
        todo = []
        for f in self.jobs.files(self.job_id, states=("pending", "running", "done", "failed")):
            if f.state == "done" and self.index.catalog.by_source(f.path) is not None:
                continue
            if f.state == "failed" and not f.reason.startswith("gave up after"):  # kills charged by older runs
                continue
            plan = plan_file(f, self.index, self.settings)
            if plan.runs:
                todo.append(plan)
            elif plan.outcome is Outcome.UNCHANGED:
                self._close(plan, FileOutcome(plan.path, Status.UNCHANGED, plan.reason))
            elif plan.outcome is Outcome.MOVED:
                self._close(plan, write_move(self.index, plan.path, plan.video_id, plan.meta, plan.reason))
            elif plan.outcome is Outcome.NEW_METADATA:
                self._close(plan, write_metadata(self.index, plan.path, plan.video_id, plan.meta, plan.reason))
            elif plan.outcome is Outcome.POISON:
                self._close(plan, FileOutcome(plan.path, Status.FAILED, plan.reason))
            else:
                self._close(plan, FileOutcome(plan.path, Status.SKIPPED, plan.reason))
        return todo

    def run(self, todo: list[Plan], pipeline: StagePipeline) -> None:
        """The loop: step the scheduler, write what finished, until every file is done or the job is cancelled."""
        executor = pipeline.executor()
        clock = _Clock(len(todo))
        scheduler = self._scheduler(executor, pipeline, len(todo), clock)
        for plan in todo:
            route, start = self._route(plan, [s.name for s in pipeline.stages])
            scheduler.add(plan, route, start)
        try:
            while not scheduler.done:
                if self._cancelled():
                    self._cancel(scheduler)
                    break
                for finished in scheduler.step():
                    self._close(finished.plan, self._write(executor, finished), finished.busy)
                    clock.written()
                self._tick(scheduler, executor)
        finally:
            scheduler.stop()
        clock.report()
        self._tick(scheduler, executor, force=True)

    def _scheduler(self, executor: Executor[Any], pipeline: StagePipeline, files: int, clock: _Clock) -> Scheduler:
        names = [s.name for s in pipeline.stages]
        self.stats = IngestStats(self.job_id, files, [StageStats(s.name, s.workers) for s in pipeline.stages])

        def dispatched(stage: str, path: str) -> None:
            clock.dispatched(stage, path)
            self.hooks.on_dispatch(stage, path)

        hooks = SchedulerHooks(on_work=self._working, on_dispatch=dispatched)
        return Scheduler(executor, names, self.settings.ray.max_files_in_flight, self.settings.ingest.file_timeout,
                         hooks)

    def _route(self, plan: Plan, stages: list[StageName]) -> tuple[Route, Callable[[], Any]]:
        """A file's route over the pipeline's stages and its first input. A pipeline's summary stage is passed
        by without summaries; a file that only needs its summary starts there, from the index (read when it is
        admitted, to bound memory)."""
        route = FULL_ROUTE.only(stages)
        if not self.settings.ingest.summaries:
            route = route.without(StageName.SUMMARY)
        if plan.outcome is Outcome.NEW:
            return route, lambda: plan.path
        video_id = plan.video_id or ""

        def indexed() -> Any:
            if StageName.SUMMARY not in stages:
                raise StageError("the pipeline has no summary stage to summarise with (ingest.summaries)")
            return indexed_item(self.index, video_id)

        return route.from_then(StageName.SUMMARY), indexed

    def _working(self, plan: Plan, working: bool) -> None:
        """A stage call on the file started (or its last one ended): a run that crashes while one runs charges
        the file one attempt; a file waiting for a stage, or never started, is charged nothing."""
        self.jobs.set_working(self.job_id, plan.path, 1 if working else -1)

    def _write(self, executor: Executor[Any], finished: Finished) -> FileOutcome:
        plan = finished.plan
        try:
            if finished.error is not None:
                raise finished.error
            item = merge(executor.fetch(finished.results))
        except Exception as exc:
            return FileOutcome(plan.path, Status.FAILED, reason_of(exc), video_id=plan.video_id)
        if plan.outcome is Outcome.NEEDS_SUMMARY:
            return write_summary(self.index, item, plan.meta)
        return write_item(self.index, item, plan.meta)

    def _close(self, plan: Plan, outcome: FileOutcome, busy: list[tuple[StageName, float]] | None = None) -> None:
        state: FileState = "failed" if outcome.status is Status.FAILED else \
            "skipped" if outcome.status is Status.SKIPPED else "done"
        # A file closed after it went through the stages counts the attempt of this run.
        self.jobs.set_file(self.job_id, plan.path, state, outcome.reason, video_id=outcome.video_id,
                           attempt=int(busy is not None))
        if busy is not None:
            self._count(outcome, busy)
        self._record(outcome)

    def _count(self, outcome: FileOutcome, busy: list[tuple[StageName, float]]) -> None:
        stats = self.stats
        assert stats is not None
        if outcome.status is Status.FAILED:
            stats.failed += 1
            return
        stages = {s.name: s for s in stats.stages}
        for stage, seconds in busy:
            stages[stage].files += 1
            stages[stage].busy += seconds
            stages[stage].media += outcome.duration
        stats.media += outcome.duration
        stats.done += 1

    def _record(self, outcome: FileOutcome) -> None:
        self.report.outcomes.append(outcome)
        self.hooks.on_file(outcome)

    def _tick(self, scheduler: Scheduler, executor: Executor[Any], force: bool = False) -> None:
        """About once a second: the counts, and how far the stages are with the files in them, to the hooks."""
        if self.stats is None or not (force or time.monotonic() - self.last_tick >= 1.0):
            return
        calls = scheduler.in_flight()
        shares = executor.progress([task for task, _ in calls]) if calls else {}
        working: dict[str, dict[str, float | None]] = {}
        began: dict[str, dict[str, float]] = {}
        for task, plan in sorted(calls, key=lambda call: list(StageName).index(call[0].stage)):
            working.setdefault(plan.path, {})[task.stage.value] = shares.get(task)
            began.setdefault(plan.path, {})[task.stage.value] = task.started
        self.stats.working, self.stats.began = working, began
        self.last_tick = time.monotonic()
        self.hooks.on_tick(self.stats)
        if force or self.last_tick - self.last_record >= RECORD_EVERY:
            self.last_record = self.last_tick
            self.jobs.set_progress(self.job_id, self.stats.record())

    def _cancelled(self) -> bool:
        return self.hooks.cancelled() or self.jobs.is_cancel_requested(self.job_id)

    def _cancel(self, scheduler: Scheduler) -> None:
        """Stop at this file boundary: files in flight go back to pending, uncharged; finished files stay."""
        for plan in scheduler.stop():
            self.jobs.set_file(self.job_id, plan.path, "pending", "cancelled")
        self.jobs.set_state(self.job_id, "cancelled", error="cancelled")
        self.report.cancelled = True

    def _stopped(self, exc: BaseException) -> None:
        """The run stopped on an error or Ctrl-C: files caught in flight go back to pending for a resume (the
        catalog prevents doubles), uncharged: the run stopped in order (`Scheduler.stop`), it did not die."""
        interrupted = isinstance(exc, KeyboardInterrupt)
        for f in self.jobs.files(self.job_id, states=("running",)):
            self.jobs.set_file(self.job_id, f.path, "pending", "interrupted")  # also ends its stage calls' count
        self.jobs.set_state(self.job_id, "cancelled" if interrupted else "failed",
                            error="interrupted" if interrupted else reason_of(exc))



class _Clock:
    """When a run's phases happened, logged at INFO: each stage's first call, the first file written (the
    first searchable one), the last file's entry into the stages and the drain after it."""

    def __init__(self, files: int) -> None:
        self.began = time.monotonic()
        self.files, self.done = files, 0
        self.first_call: dict[str, float] = {}
        self.entered: set[str] = set()
        self.last_entry: float | None = None

    def dispatched(self, stage: str, path: str) -> None:
        now = time.monotonic() - self.began
        if stage not in self.first_call:
            self.first_call[stage] = now
            log.info("ingest: %s stage's first call at %.1f s", stage, now)
        if path not in self.entered:
            self.entered.add(path)
            if len(self.entered) == self.files:
                self.last_entry = now

    def written(self) -> None:
        self.done += 1
        if self.done == 1:
            log.info("ingest: first file written (searchable) at %.1f s", time.monotonic() - self.began)

    def report(self) -> None:
        end = time.monotonic() - self.began
        drain = f"; drain after the last file entered the stages {end - self.last_entry:.1f} s" \
            if self.last_entry is not None else ""
        log.info("ingest: %d of %d files written in %.1f s%s", self.done, self.files, end, drain)
