"""What one running API holds: settings, the open index and embedder, keys, limits, jobs, metrics."""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

from mediaindex.api.catalog import PerThreadCatalog
from mediaindex.api.errors import ApiError
from mediaindex.api.keys import KeyStore, keys_db_path
from mediaindex.api.metrics import Metrics
from mediaindex.api.paths import MediaRoots
from mediaindex.api.ratelimit import RateLimiter
from mediaindex.config import Settings
from mediaindex.jobs import JobStore

log = logging.getLogger("mediaindex.api")


class LockedEmbedder:
    """The embedder behind a lock (it is not known to be thread-safe); the vector search that follows
    an embedding runs outside the lock, so concurrent searches overlap there."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self.name, self.dim = embedder.name, embedder.dim

    def embed_query(self, text: str):  # -> np.ndarray
        with self._lock:
            return self._embedder.embed_query(text)

    def embed_passages(self, texts: list[str]):  # -> np.ndarray
        with self._lock:
            return self._embedder.embed_passages(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


def jobs_db_path(settings: Settings) -> Path:
    return settings.index_dir / "jobs.db"


class ApiState:
    def __init__(self, settings: Settings, index: Any = None, embedder: Any = None, pipeline: Any = None) -> None:
        from mediaindex.api.runner import JobRunner

        self.settings = settings
        api = settings.api
        self.upload_dir = (Path(api.upload_dir).expanduser() if api.upload_dir else settings.index_dir / "uploads")
        self.upload_dir.mkdir(parents=True, exist_ok=True)
        # Uploaded files are media too: the upload folder is always a root.
        self.roots = MediaRoots([*api.media_roots, self.upload_dir])
        self.thumbs = MediaRoots([settings.thumbs_dir])
        self.keys = KeyStore(keys_db_path(settings))
        self.jobs = JobStore(jobs_db_path(settings))
        self.jobs_lock = threading.Lock()  # one JobStore connection is shared by request and job threads
        self.limiter = RateLimiter(api.rate_limit_per_minute, api.rate_limit_burst)
        self.metrics = Metrics(self.job_counts)
        self._index, self._pipeline = index, pipeline
        self._embedder = LockedEmbedder(embedder) if embedder is not None else None
        self._own_index = index is None
        self._own_pipeline = pipeline is None
        self.open_error: str | None = None
        self.runner = JobRunner(self)

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Load the embedder and open the index; a failure leaves the API up but not ready."""
        try:
            if self._embedder is None:
                from mediaindex.models.text_embed import load_text_embedder

                self._embedder = LockedEmbedder(load_text_embedder(self.settings.embed))
            # The first query pays the embedder's warm-up: pay it here, not in a client's request.
            self._embedder.embed_query("warm-up")
            if self._index is None:
                from mediaindex.index.index import MediaIndex

                self._index = MediaIndex(self.settings, self._embedder.dim, self._embedder.name)
            if not isinstance(self._index.catalog, PerThreadCatalog):
                # Opened on another thread it cannot be closed here; per-thread catalogs replace it anyway.
                with contextlib.suppress(Exception):
                    self._index.catalog.close()
                self._index.catalog = PerThreadCatalog(self._index.dir / "catalog.db")
        except Exception as exc:  # reported by /health/ready and every data endpoint
            self.open_error = str(exc) or type(exc).__name__
            log.error("the index could not be opened: %s", self.open_error)
            return
        self.runner.start()

    def close(self) -> None:
        self.runner.stop()
        if self._pipeline is not None and self._own_pipeline:
            self._pipeline.close()
        if self._index is not None and self._own_index:
            self._index.close()
        self.keys.close()

    # --- accessors -------------------------------------------------------------------------------
    @property
    def index(self):  # -> MediaIndex
        if self._index is None or self.open_error:
            raise ApiError(503, f"the index is not available: {self.open_error or 'still opening'}")
        return self._index

    @property
    def embedder(self):  # -> TextEmbedder
        if self._embedder is None:
            raise ApiError(503, f"the text embedder is not available: {self.open_error or 'still loading'}")
        return self._embedder

    def pipeline(self, settings: Settings | None = None):  # -> Pipeline
        """Stage pools that can run an ingest job with `settings` (default: the server's).

        Started on the first ingest job (Ray takes seconds to start), and once more, with the summary stage,
        for the first job that asks for summaries when the pools have none; jobs without summaries pass that
        stage by, so requests that switch summaries on and off do not restart the models.
        """
        from mediaindex.ingest.run import Pipeline
        from mediaindex.stages.registry import StageName

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
