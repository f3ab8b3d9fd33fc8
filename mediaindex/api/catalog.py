"""Thread-safe reading of the index from request threads.

The catalog's SQLite connection belongs to the thread that opened it, while requests and jobs run
on other threads: each thread gets its own `Catalog` on the same file (SQLite keeps them consistent).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mediaindex.index.catalog import Catalog
from mediaindex.index.store import hit_from_payload
from mediaindex.segments import Hit


class PerThreadCatalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def _catalog(self) -> Catalog:
        catalog = getattr(self._local, "catalog", None)
        if catalog is None:
            catalog = self._local.catalog = Catalog(self.path)
        return catalog

    def __getattr__(self, name: str):
        return getattr(self._catalog(), name)

    def close(self) -> None:
        catalog = getattr(self._local, "catalog", None)
        if catalog is not None:
            catalog.close()
            self._local.catalog = None


def video_segments(store, video_id: str, modality: str | None = None) -> list[Hit]:
    """Every segment of one video, in time order."""
    return [hit_from_payload(p, 0.0) for p in store.segments_of(video_id, modality)]
