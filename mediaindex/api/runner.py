"""Background jobs: one worker thread runs ingest and summarize jobs in order, on the persisted records.

Jobs that a stopped server left pending or running are picked up again when it starts; an ingest
job then goes on with the files that were not finished.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mediaindex.api.state import ApiState

log = logging.getLogger("mediaindex.api.jobs")


class JobRunner:
    def __init__(self, state: ApiState) -> None:
        self.state = state
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        with self.state.jobs_lock:
            leftover = [j for j in self.state.jobs.list(limit=10_000)
                        if j.state in ("pending", "running") and j.params.get("origin") == "api"]
        for job in sorted(leftover, key=lambda j: j.created):
            self._queue.put(job.id)
        self._thread = threading.Thread(target=self._loop, name="mediaindex-jobs", daemon=True)
        self._thread.start()

    def submit(self, job_id: str) -> None:
        self._queue.put(job_id)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while (job_id := self._queue.get()) is not None:
            try:
                self._run(job_id)
            except Exception as exc:  # a job's failure is recorded on the job; the runner goes on
                log.exception("job %s failed", job_id)
                self._set(job_id, "failed", error=f"{type(exc).__name__}: {exc}")

    def _set(self, job_id: str, state: str, result: Any = None, error: str | None = None) -> None:
        with self.state.jobs_lock:
            self.state.jobs.set_state(job_id, state, result=result, error=error)  # type: ignore[arg-type]

    def _run(self, job_id: str) -> None:
        with self.state.jobs_lock:
            job = self.state.jobs.get(job_id)
        if job.state not in ("pending", "running"):
            return
        self._set(job_id, "running")
        if job.kind == "ingest":
            self._ingest(job_id, job.params)
        elif job.kind == "summarize":
            self._summarize(job_id, job.params)
        else:
            self._set(job_id, "failed", error=f"unknown job kind {job.kind!r}")

    def _ingest(self, job_id: str, params: dict[str, Any]) -> None:
        from mediaindex.ingest.run import FileOutcome, ingest, with_summaries

        state, metrics = self.state, self.state.metrics
        # The request's "summaries" overrides ingest.summaries for this job, as `ingest --summaries` does.
        settings = with_summaries(state.settings, params.get("summaries"))

        def progress(o: FileOutcome) -> None:
            metrics.files.labels(o.status).inc()
            if o.status == "summarised":  # its summary and chapters are new segments; its media was counted before
                metrics.segments.inc(o.segments)
            if o.status == "indexed":
                metrics.segments.inc(o.segments)
                record = state.index.catalog.get(o.video_id) if o.video_id else None
                if record is not None and record.duration:
                    metrics.media_seconds.inc(record.duration)

        started = time.monotonic()
        try:
            # The ingest runs this job's own record (files, states, attempts) in jobs.db: a new run would
            # record a second ingest job for the same files.
            report = ingest([], settings, state.index, pipeline=state.pipeline(settings), progress=progress,
                            resume=job_id, finish_job=False)  # the job ends below, with this result
        finally:
            metrics.ingest_seconds.inc(time.monotonic() - started)
        with state.jobs_lock:
            files = state.jobs.files(job_id)
        done = [f for f in files if f.state == "done"]
        failed = [f for f in files if f.state in ("failed", "skipped")]
        result = {
            "indexed": len(report.indexed), "summarised": len(report.by_status("summarised")),
            "unchanged": len(report.by_status("unchanged")),
            "failed": len(failed), "video_ids": sorted({f.video_id for f in done if f.video_id}),
            "segments": sum(o.segments for o in report.indexed + report.by_status("summarised")),
        }
        if done:
            self._set(job_id, "done", result=result)
        else:
            reasons = "; ".join(f"{f.path}: {f.reason}" for f in failed[:5]) or "no file was processed"
            self._set(job_id, "failed", result=result, error=f"nothing could be indexed: {reasons}")

    def _summarize(self, job_id: str, params: dict[str, Any]) -> None:
        """The agentic summary job, on this server's open index (it sets the job's state itself)."""
        from mediaindex.agents import run_summarize_job
        from mediaindex.agents.tools import Archive

        run_summarize_job(self.state.settings, job_id, archive=Archive(self.state.index, self.state.embedder,
                                                                         self.state.settings.vision))
