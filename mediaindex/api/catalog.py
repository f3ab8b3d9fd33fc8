"""Thread-safe reading of the index from request threads.

The catalog's SQLite connection belongs to the thread that opened it, while requests and jobs run
on other threads: each thread gets its own `Catalog` on the same file (SQLite keeps them consistent).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mediaindex.index.catalog import Catalog
from mediaindex.index.store import SearchFilters
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


def video_segments(store, video_id: str, modality: str | None = None, expected: int = 0) -> list[Hit]:
    """Every segment of one video, in time order.

    Uses a scroll on the embedded Qdrant shard (exact, unlike a filtered nearest-neighbour query);
    other stores fall back to a filtered query asking for all of the video's points.
    """
    shard = getattr(store, "_shard", None)
    if shard is not None and hasattr(shard, "scroll"):
        from qdrant_edge import FieldCondition, Filter, MatchValue, ScrollRequest

        conditions = [FieldCondition(key="video_id", match=MatchValue(video_id))]
        if modality:
            conditions.append(FieldCondition(key="modality", match=MatchValue(modality)))
        hits: list[Hit] = []
        offset = None
        while True:
            records, offset = shard.scroll(ScrollRequest(filter=Filter(must=conditions), limit=1000,
                                                         offset=offset, with_payload=True))
            hits.extend(_to_hit(r.payload or {}) for r in records)
            if offset is None or not records:
                break
    else:
        import numpy as np

        dim = getattr(store, "dims", {}).get("text", 384)
        probe = np.full(dim, 1.0 / np.sqrt(dim), dtype=np.float32)
        hits = store.search(probe, limit=max(expected, 1) + 100,
                            filters=SearchFilters(video_id=video_id, modality=modality))
    return sorted(hits, key=lambda h: (h.start, h.end))
