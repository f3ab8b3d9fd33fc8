"""The media roots watched (`api.watch_s`): files new or changed there become ingest jobs, as POST /ingest makes.

A thread looks at the roots every `watch_s` seconds (service/watch.py says which files are ready: settled, not
held by the index as they are, each version once) and queues one job for what it finds; the job runner runs it
like any other, moved files keep their entries, and the jobs are listed with the others."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mediaindex.api.errors import ApiError

if TYPE_CHECKING:
    from mediaindex.api.state import ApiState

log = logging.getLogger("mediaindex.api.watch")


class RootWatcher:
    def __init__(self, state: ApiState) -> None:
        self.state = state
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.state.settings.api.watch_s is None or not self.state.settings.api.media_roots or self._thread:
            return
        self._thread = threading.Thread(target=self._loop, name="mediaindex-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        from mediaindex.api.routes.jobs import ingest_job
        from mediaindex.service.watch import FolderWatch

        state, every = self.state, float(self.state.settings.api.watch_s or 0)
        roots = [Path(r).expanduser() for r in state.settings.api.media_roots]
        watch = FolderWatch(state.archive, roots, ingested=False)
        log.info("watching %s every %g s", ", ".join(map(str, roots)), every)
        while not self._stop.wait(every):
            try:
                files = [f for f in watch.look() if state.media.refusal(Path(f), Path(f).resolve()) is None]
            except OSError as exc:  # a root unmounted meanwhile: looked at again next time
                log.warning("the media roots could not be read: %s", exc)
                continue
            if not files:
                continue
            try:
                job, joined = ingest_job(state, [(f, {}) for f in files], None)
            except ApiError as exc:  # a full queue, an index not open: offered again at the next look
                watch.untake(files)
                log.warning("%d new or changed file(s) wait: %s", len(files), exc.message)
                continue
            if not joined:
                state.runner.submit(job.id)
            log.info("job %s: %d new or changed file(s) in the media roots", job.id, len(files))
