"""Thread-safe reading of the index from request threads.

The catalog's SQLite connection belongs to the thread that opened it, while requests and jobs run
on other threads: each thread gets its own `Catalog` on the same file (SQLite keeps them consistent).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mediaindex.index.catalog import Catalog
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


def _to_hit(payload: dict) -> Hit:
    return Hit(source=payload.get("source", ""), video_id=payload.get("video_id", ""),
               start=float(payload.get("start", 0.0)), end=float(payload.get("end", 0.0)), score=0.0,
               modality=payload.get("modality", ""), text=payload.get("text") or "",
               language=payload.get("language"), thumbnail=payload.get("thumbnail"))


def video_segments(store, video_id: str, modality: str | None = None) -> list[Hit]:
    """Every segment of one video, in time order."""
    hits = [_to_hit(p) for p in store.segments_of(video_id, modality)]
    return sorted(hits, key=lambda h: (h.start, h.end))
