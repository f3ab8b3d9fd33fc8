"""What one running API holds: settings, the open index and embedder, keys, limits, jobs, metrics."""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediaindex.api.errors import ApiError
from mediaindex.api.keys import KeyStore, keys_db_path
from mediaindex.api.metrics import Metrics
from mediaindex.api.paths import MediaPolicy, MediaRoots
from mediaindex.api.ratelimit import RateLimiter
from mediaindex.api.runner import JobRunner
from mediaindex.api.watcher import RootWatcher
from mediaindex.config import Settings
from mediaindex.index.index import make_index_folder
from mediaindex.index.per_thread_catalog import PerThreadCatalog
from mediaindex.jobs import JobStore
from mediaindex.service.archive import Archive, load_embedder

if TYPE_CHECKING:
    import numpy as np

    from mediaindex.index.index import MediaIndex
    from mediaindex.service import Pipeline

log = logging.getLogger("mediaindex.api")
THUMB_SUFFIXES = {".jpg", ".jpeg", ".webp"}


class LockedEmbedder:
    """The embedder behind a lock (it is not known to be thread-safe); the vector search that follows
    an embedding runs outside the lock, so concurrent searches overlap there."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self.name, self.dim = embedder.name, embedder.dim

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return self._embedder.embed_query(text)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._embedder.embed_passages(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._embedder.embed_queries(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


def file_title(source: str, metadata: dict[str, Any]) -> str:
    """What answers call a file: the title its metadata gives (a manifest's `title`), else its file name."""
    given = metadata.get("title")
    return given.strip() if isinstance(given, str) and given.strip() else Path(source).name


class ApiState:
    def __init__(self, settings: Settings, index: Any = None, embedder: Any = None, pipeline: Any = None,
                 advertise_url: str | None = None) -> None:
        self.settings = settings
        self.advertise_url = advertise_url  # recorded in the index folder: commands run beside go through it
        api = settings.api
        self.upload_dir = settings.upload_dir
        make_index_folder(settings.index_dir)  # a file there, or a folder that cannot be made, is said so
        self.upload_dir.mkdir(parents=True, exist_ok=True)
        # Uploaded and downloaded files are media too: their folders are always roots.
        self.roots = MediaRoots([*api.media_roots, self.upload_dir, settings.download_dir])
        self.thumbs = MediaRoots([settings.thumbs_dir])
        from mediaindex.pipeline.discover import MEDIA_SUFFIXES

        # Whatever the roots, the index's own files (catalog, jobs, keys, vectors, thumbnails' folder for
        # /files/) never leave the server, and neither does anything hidden.
        own = [settings.index_dir, settings.cache_dir, settings.temp_dir, keys_db_path(settings)]
        self.media = MediaPolicy(self.roots, own, allowed_inside_private=[self.upload_dir, settings.download_dir],
                                 suffixes=MEDIA_SUFFIXES)
        self.thumb_files = MediaPolicy(self.thumbs, [keys_db_path(settings)], [], suffixes=THUMB_SUFFIXES)
        # Server folders that never appear in an answer: messages name them by these labels instead.
        home = os.path.expanduser("~")
        hidden = [(self.upload_dir, "<uploads>"), (settings.index_dir, "<index>"), (settings.temp_dir, "<temp>"),
                  (settings.cache_dir, "<cache>"), (Path(tempfile.gettempdir()), "<temp>"), (Path(home), "~")]
        self._hidden = sorted({(str(Path(p).expanduser().resolve()), label) for p, label in hidden if str(p) != "/"}
                              | {(str(Path(p).expanduser()), label) for p, label in hidden if str(p) != "/"},
                              key=lambda pl: -len(pl[0]))
        # An uploaded file is shown by the name it was uploaded under, never by the folder that keeps it.
        uploads = sorted({str(self.upload_dir.expanduser()), str(self.upload_dir.expanduser().resolve())}, key=len,
                         reverse=True)
        suffixes = "|".join(sorted((re.escape(s[1:]) for s in MEDIA_SUFFIXES), key=len, reverse=True))
        self._uploaded = re.compile(rf"(?:{'|'.join(re.escape(u) for u in uploads)})/[^/\s]+/"
                                    rf"(?P<name>[^/\n]*?\.(?:{suffixes}))(?![\w.])", re.IGNORECASE)
        self.keys = KeyStore(keys_db_path(settings))
        self.jobs = JobStore.of(settings)
        self.jobs_lock = threading.Lock()  # one JobStore connection is shared by request and job threads
        self.limiter = RateLimiter(api.rate_limit_per_minute, api.rate_limit_burst)
        self.metrics = Metrics(self.job_counts)
        if index is not None and not isinstance(index.catalog, PerThreadCatalog):
            raise TypeError("an index served by the API is read from many threads: open it with "
                            "open_index(..., thread_safe=True)")
        self._index, self._pipeline = index, pipeline
        self._embedder = LockedEmbedder(embedder) if embedder is not None else None
        self._own_index = index is None
        self._own_pipeline = pipeline is None
        self.open_error: str | None = None
        self.runner = JobRunner(self)
        self.watcher = RootWatcher(self)

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Load the embedder and open the index; a failure leaves the API up but not ready."""
        try:
            if self._embedder is None:
                self._embedder = LockedEmbedder(load_embedder(self.settings))
            # The first query pays the embedder's warm-up: pay it here, not in a client's request.
            self._embedder.embed_query("warm-up")
            if self._index is None:
                # Request and job threads each get their own catalog connection.
                self._index = Archive.open(self.settings, must_exist=False, thread_safe=True,
                                           embedder=self._embedder).index
                if self.advertise_url:
                    self._index.advertise(self.advertise_url)
        except Exception as exc:  # reported by /health/ready and every data endpoint
            log.error("the index could not be opened: %s", exc)
            self.open_error = self.public(str(exc) or type(exc).__name__)
            return
        self.runner.start()
        self.watcher.start()

    def close(self) -> None:
        self.watcher.stop()
        if not self.runner.stop():
            # The job left running still uses the index and the stage pools: closing them under it could break
            # its writes. The process is ending; the job goes on at the next start (and Ray's processes end with
            # this process: see mediaindex.workers.watchdog).
            self.keys.close()
            return
        if self._pipeline is not None and self._own_pipeline:
            self._pipeline.close()
        if self._index is not None and self._own_index:
            self._index.close()
        self.keys.close()

    def shown(self, value: Any) -> Any:
        """A path, a message, or a JSON value holding them, as an answer shows it: every uploaded file by the name
        it was uploaded under (answers never show the index's folders)."""
        if isinstance(value, str):
            return self._uploaded.sub(lambda m: m["name"], value)
        if isinstance(value, dict):
            return {k: self.shown(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.shown(v) for v in value]
        return value

    def title(self, video_id: str, source: str) -> str:
        """What answers call an indexed file (`file_title`), looked up by its id."""
        record = self.index.catalog.get(video_id)
        return file_title(source, record.metadata if record is not None else {})

    def public(self, message: str) -> str:
        """The message with this server's own folders replaced by labels (answers never show them)."""
        message = self.shown(message)
        for path, label in self._hidden:
            message = message.replace(path, label)
        return message

    # --- accessors -------------------------------------------------------------------------------
    @property
    def index(self) -> MediaIndex:
        if self._index is None or self.open_error:
            raise ApiError(503, f"the index is not available: {self.open_error or 'still opening'}")
        return self._index

    @property
    def archive(self) -> Archive:
        """The open index and embedder behind the calls of the service (search, transcripts, agent jobs)."""
        return Archive(self.settings, self.index, self.embedder)

    @property
    def embedder(self) -> LockedEmbedder:
        if self._embedder is None:
            raise ApiError(503, f"the text embedder is not available: {self.open_error or 'still loading'}")
        return self._embedder

    def pipeline(self, settings: Settings | None = None) -> Pipeline:
        """Stage pools that can run an ingest job with `settings` (default: the server's).

        Started on the first ingest job (Ray takes seconds to start), and once more, with the summary stage,
        for the first job that asks for summaries when the pools have none; jobs without summaries pass that
        stage by, so requests that switch summaries on and off do not restart the models.
        """
        from mediaindex.pipeline.stages.registry import StageName
        from mediaindex.service import Pipeline

        settings = settings or self.settings
        held = self._pipeline
        if held is not None and (not settings.ingest.summaries or StageName.SUMMARY in [s.name for s in held.stages]):
            return held
        if held is not None and self._own_pipeline:
            held.close()  # its actors hold the Ray resources the new pools need
            self._pipeline = None
        self._pipeline, self._own_pipeline = Pipeline(settings), True
        return self._pipeline

    def keys_required(self) -> bool:
        return self.settings.api.require_keys or self.keys.any_configured()

    def job_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        with self.jobs_lock:
            jobs = self.jobs.list(limit=100_000)
        for job in jobs:
            counts[(job.kind, job.state)] = counts.get((job.kind, job.state), 0) + 1
        return counts
