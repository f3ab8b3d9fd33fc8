"""Background jobs: one worker thread runs ingest and summarize jobs in order, on the persisted records.

Jobs that a stopped server left pending or running are picked up again when it starts; an ingest
job then goes on with the files that were not finished. A job cancelled while it waited is never
started; a running ingest asked to stop ends at its next file boundary, as "cancelled", with the
files it finished kept (a summary or question, before its next language-model call). After each job, uploads that were not indexed are swept (see uploads.py).
An ingest job given web addresses downloads them first, each file found joining the job's files.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from mediaindex.api.uploads import sweep_uploads
from mediaindex.config import Settings
from mediaindex.jobs import JobStore
from mediaindex.media.download import is_url

log = logging.getLogger("mediaindex.api.jobs")
STOP_WAIT_S = 5.0  # how long a stopping server waits for the job in progress to end
DOWNLOAD_REPORT_S = 1.0  # a download's share done is recorded on its job at most this often


class _Stopped(Exception):
    """A download ended because its job was cancelled or the server is stopping."""


class JobHost(Protocol):
    """What the runner needs of the server it runs in (ApiState is one)."""

    settings: Settings
    jobs: JobStore
    jobs_lock: threading.Lock
    upload_dir: Path
    metrics: Any

    @property
    def index(self) -> Any: ...

    @property
    def embedder(self) -> Any: ...

    @property
    def archive(self) -> Any: ...

    def pipeline(self, settings: Settings | None = None) -> Any: ...


class JobRunner:
    def __init__(self, host: JobHost) -> None:
        self.state = host
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        if self._thread is not None:
            return
        with self.state.jobs_lock:
            leftover = [j for j in self.state.jobs.list(limit=10_000)
                        if j.active and j.params.get("origin") == "api"]
        for job in sorted(leftover, key=lambda j: j.created):
            self._queue.put(job.id)
        self.sweep()
        self._thread = threading.Thread(target=self._loop, name="mediaindex-jobs", daemon=True)
        self._thread.start()

    def submit(self, job_id: str) -> None:
        self._queue.put(job_id)

    def stop(self, wait: float = STOP_WAIT_S) -> bool:
        """Start no more jobs (those waiting stay pending); True once the worker thread has ended. A job still
        running after `wait` seconds is left as it is, as after a kill: its record says running, and the next
        start goes on with it. A server asked to stop (SIGTERM) thus stops in seconds, not when a long file is
        done."""
        if self._thread is None:
            return True
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout=wait)
        if self._thread.is_alive():
            log.warning("a job is still running: it is left for the next start to go on with")
            return False
        self._thread = None
        return True

    def sweep(self) -> None:
        with self.state.jobs_lock:
            jobs = self.state.jobs.list(kind="ingest", limit=100_000)
        try:
            sweep_uploads(self.state.upload_dir, jobs, self.state.settings.api.failed_upload_retention_s)
        except OSError as exc:  # a sweep that cannot delete tries again after the next job
            log.warning("uploads could not be swept: %s", exc)

    def _loop(self) -> None:
        while (job_id := self._queue.get()) is not None and not self._stopping.is_set():
            try:
                self._run(job_id)
            except (Exception, SystemExit) as exc:  # Ray ends a thread waiting on it with SystemExit as it stops
                if self._stopping.is_set():  # the server stopped under the job: it is left as after a kill
                    log.info("job %s was interrupted by the server's stop: the next start goes on with it", job_id)
                    return
                if isinstance(exc, SystemExit):
                    raise
                log.exception("job %s failed", job_id)  # a job's failure is recorded on the job; the runner goes on
                self._set(job_id, "failed", error=f"{type(exc).__name__}: {exc}")
            self.sweep()

    def _set(self, job_id: str, state: str, result: Any = None, error: str | None = None) -> None:
        with self.state.jobs_lock:
            self.state.jobs.set_state(job_id, state, result=result, error=error)  # type: ignore[arg-type]

    def _cancel_requested(self, job_id: str) -> bool:
        with self.state.jobs_lock:
            return self.state.jobs.is_cancel_requested(job_id)

    def _run(self, job_id: str) -> None:
        with self.state.jobs_lock:
            job = self.state.jobs.get(job_id)
            # A job cancelled while it waited (or ended meanwhile) is not started.
            if not self.state.jobs.claim(job_id):
                if job.active:  # cancelled while running, before a restart: it ends here
                    self.state.jobs.set_state(job_id, "cancelled", error="cancelled")
                return
        if job.kind == "ingest":
            self._ingest(job_id, job.params)
        elif job.kind == "summarize":
            self._summarize(job_id, job.params)
        elif job.kind == "ask":
            self._ask(job_id)
        else:
            self._set(job_id, "failed", error=f"unknown job kind {job.kind!r}")

    def _ingest(self, job_id: str, params: dict[str, Any]) -> None:
        from mediaindex.service import FileOutcome, IngestHooks, IngestRequest, ingest, with_choices

        state, metrics = self.state, self.state.metrics
        # The request's "summaries" overrides ingest.summaries for this job, as `ingest --summaries` does.
        settings = with_choices(state.settings, params.get("summaries"), params.get("reindex"))

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
        if urls := params.get("urls"):
            try:
                self._download(job_id, urls, params.get("url_metadata") or {}, settings)
            except _Stopped:
                if self._stopping.is_set():  # left running, as after a kill: the next start goes on with it
                    raise
                self._set(job_id, "cancelled", error="cancelled while downloading its web addresses: nothing indexed")
                return
        try:
            # The ingest runs this job's own record (files, states, attempts) in jobs.db: a new run would
            # record a second ingest job for the same files.
            request = IngestRequest(settings, resume=job_id, finish_job=False)  # the job ends below, with this result
            report = ingest(request, state.index, state.pipeline(settings), IngestHooks(on_file=progress))
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
        left = [f for f in files if f.state in ("pending", "running")]
        if self._cancel_requested(job_id) and left:
            self._set(job_id, "cancelled", result=result,
                      error=f"cancelled: {len(done)} file(s) finished and kept, {len(left)} not started")
        elif done:
            self._set(job_id, "done", result=result)
        else:
            reasons = "; ".join(f"{f.path if is_url(f.path) else Path(f.path).name}: {f.reason}"
                                for f in failed[:5]) or "no file was processed"
            self._set(job_id, "failed", result=result, error=f"nothing could be indexed: {reasons}")

    def _download(self, job_id: str, urls: list[str], metadata: dict[str, dict], settings: Settings) -> None:
        """The job's web addresses, downloaded into the download folder (a file there already, as its server has
        it, is not downloaded again: a resumed job finds what it downloaded before). Each file found joins the
        job's files, with its address's metadata; an address that gives none is listed among them as skipped,
        with why."""
        from mediaindex.media.download import (
            Downloaded,
            DownloadError,
            DownloadStopped,
            download,
            public_only,
            public_peer,
        )
        from mediaindex.pipeline.discover import MEDIA_SUFFIXES

        policy = settings.api.fetch_urls
        for url in urls:
            last = 0.0

            def shown(done: int, total: int | None, url: str = url) -> None:
                nonlocal last
                if self._stopping.is_set():
                    raise _Stopped
                if time.monotonic() - last < DOWNLOAD_REPORT_S:
                    return
                last = time.monotonic()
                if self._cancel_requested(job_id):
                    raise _Stopped
                share = min(1.0, done / total) if total else None
                with self.state.jobs_lock:
                    self.state.jobs.set_progress(job_id, {"now": {url: {"download": share}}, "updated": time.time()})

            shown(0, None)
            try:
                if policy == "off":
                    raise DownloadError("this server does not download web addresses (api.fetch_urls is off)")
                got = download(url, settings.download_dir, MEDIA_SUFFIXES, shown,
                               check=public_only if policy == "public" else None,
                               peer_check=public_peer if policy == "public" else None,
                               max_videos=settings.ingest.max_page_videos,
                               stopped=lambda: self._stopping.is_set() or self._cancel_requested(job_id))
            except DownloadStopped as exc:
                raise _Stopped from exc
            except DownloadError as exc:
                with self.state.jobs_lock:
                    self.state.jobs.add_files(job_id, [(url, {})], "skipped", str(exc))
                continue
            with self.state.jobs_lock:
                for each in got:
                    if isinstance(each, Downloaded):
                        self.state.jobs.add_files(job_id, [(str(each.path.resolve()), each.metadata(metadata.get(url)))])
                    else:
                        self.state.jobs.add_files(job_id, [(each.url, {})], "skipped", each.reason)

    def _summarize(self, job_id: str, params: dict[str, Any]) -> None:
        """The agentic summary job, on this server's open index (it sets the job's state itself)."""
        self.state.archive.run_job(job_id, "summarize")

    def _ask(self, job_id: str) -> None:
        """A question, on this server's open index (the job records its answer or why it failed)."""
        self.state.archive.run_job(job_id, "ask")
