"""Vector stores behind one small interface: Qdrant embedded in-process (qdrant-edge) by default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from mediaindex.segments import Hit, Segment

TEXT_VECTOR = "text"


@dataclass(frozen=True)
class SearchFilters:
    video_id: str | None = None
    modality: str | None = None
    language: str | None = None


class VectorStore(Protocol):
    """`dims` names every dense vector of a point: "text" always, others (e.g. "image") when configured."""

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None: ...

    def delete_video(self, video_id: str) -> None: ...

    def search(
        self, vector: np.ndarray, limit: int, filters: SearchFilters | None = None, using: str = TEXT_VECTOR
    ) -> list[Hit]: ...

    def count(self) -> int: ...

    def close(self) -> None: ...


def _hit(payload: dict, score: float) -> Hit:
    return Hit(
        source=payload["source"],
        video_id=payload["video_id"],
        start=float(payload["start"]),
        end=float(payload["end"]),
        score=float(score),
        modality=payload["modality"],
        text=payload.get("text") or "",
        language=payload.get("language"),
        thumbnail=payload.get("thumbnail"),
    )


class EdgeStore:
    """Qdrant's engine in-process, on disk under the index directory; no server needed."""

    def __init__(self, path: Path, dims: dict[str, int]) -> None:
        from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams

        self.path = path
        self.dims = dims
        config = EdgeConfig(
            vectors={name: EdgeVectorParams(size=dim, distance=Distance.Cosine) for name, dim in dims.items()}
        )
        if path.exists() and any(path.iterdir()):
            self._shard = EdgeShard.load(str(path), config)
        else:
            self._shard = EdgeShard.create(str(path), config)

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None:
        from qdrant_edge import Point, UpdateOperation

        if not segments:
            return
        points = [
            Point(
                id=seg.point_id(i),
                vector={TEXT_VECTOR: vec.tolist(), **{k: list(v) for k, v in seg.vectors.items() if k in self.dims}},
                payload=seg.payload(),
            )
            for i, (seg, vec) in enumerate(zip(segments, vectors, strict=True))
        ]
        self._shard.update(UpdateOperation.upsert_points(points))
        self._shard.flush()

    def delete_video(self, video_id: str) -> None:
        from qdrant_edge import UpdateOperation

        self._shard.update(UpdateOperation.delete_points_by_filter(self._filter(SearchFilters(video_id=video_id))))
        self._shard.flush()

    @staticmethod
    def _filter(filters: SearchFilters | None):  # -> qdrant_edge.Filter | None
        from qdrant_edge import FieldCondition, Filter, MatchValue

        if filters is None:
            return None
        conditions = [
            FieldCondition(key=key, match=MatchValue(value))
            for key, value in (("video_id", filters.video_id), ("modality", filters.modality),
                               ("language", filters.language))
            if value is not None
        ]
        return Filter(must=conditions) if conditions else None

    def search(
        self, vector: np.ndarray, limit: int, filters: SearchFilters | None = None, using: str = TEXT_VECTOR
    ) -> list[Hit]:
        from qdrant_edge import Query, QueryRequest

        request = QueryRequest(
            limit=limit,
            query=Query.Nearest(np.asarray(vector, dtype=np.float32).tolist(), using=using),
            with_payload=True,
            filter=self._filter(filters),
        )
        return [_hit(p.payload or {}, p.score) for p in self._shard.query(request)]

    def segments_of(self, video_id: str, modality: str | None = None) -> list[dict]:
        """Every stored segment payload of one video (optionally one modality), in time order."""
        from qdrant_edge import ScrollRequest

        payloads: list[dict] = []
        offset = None
        flt = self._filter(SearchFilters(video_id=video_id, modality=modality))
        while True:
            records, offset = self._shard.scroll(
                ScrollRequest(offset=offset, limit=256, filter=flt, with_payload=True, with_vector=False)
            )
            payloads.extend(dict(r.payload or {}) for r in records)
            if offset is None or not records:
                break
        return sorted(payloads, key=lambda p: (float(p.get("start", 0.0)), float(p.get("end", 0.0))))

    def count(self) -> int:
        from qdrant_edge import CountRequest

        return int(self._shard.count(CountRequest()))

    def close(self) -> None:
        self._shard.flush()
        self._shard.close()
