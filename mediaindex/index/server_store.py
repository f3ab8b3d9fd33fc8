"""The same store on a Qdrant server or cluster, through qdrant-client.

For archives that outgrow one machine: Qdrant's distributed mode shards and replicates the collection.
The collection has the same named vectors, sparse IDF vector and payload indexes as the embedded
store, and queries are the same engine-side prefetch + RRF fusion. `url` may also be ":memory:" or
"local:PATH" for qdrant-client's in-process mode (brute force, small collections and tests only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mediaindex.errors import IndexSchemaError, MediaIndexError
from mediaindex.index.filters import Condition, SearchFilters, conditions
from mediaindex.index.sparse import SparseEncoder
from mediaindex.index.store import (
    HIT_FIELDS,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    TEXT_VECTOR,
    Retriever,
    ScoredHit,
    SparseVec,
    VectorStore,
    batches,
    check_retrievers,
    check_vectors,
    payloads_in_time_order,
    point_payload,
    scored_hit,
    word_text,
)
from mediaindex.segments import Segment

if TYPE_CHECKING:
    from qdrant_client import QdrantClient, models


class ServerUnavailableError(MediaIndexError):
    """The Qdrant server cannot be reached or refused a request."""


def make_client(url: str, api_key: str | None, timeout: float) -> QdrantClient:
    from qdrant_client import QdrantClient

    if url == ":memory:":
        return QdrantClient(location=":memory:")
    if url.startswith("local:"):
        return QdrantClient(path=url.removeprefix("local:"))
    return QdrantClient(url=url, api_key=api_key, timeout=int(timeout))


class ServerStore(VectorStore):
    def __init__(
        self, url: str, collection: str, dims: dict[str, int], encoder: SparseEncoder | None = None,
        api_key: str | None = None, timeout: float = 30.0, hnsw_threshold: int = 20_000, hnsw_m: int = 16,
        hnsw_ef_construct: int = 100, client: Any = None,
    ) -> None:
        self.url = url
        self.collection = collection
        self.dims = dict(dims)
        self.encoder = encoder or SparseEncoder()
        opened: QdrantClient | None = None
        try:
            self._client: QdrantClient = (opened := client or make_client(url, api_key, timeout))
            self._ensure_collection(hnsw_threshold, hnsw_m, hnsw_ef_construct)
        except BaseException as exc:
            if opened is not None:
                opened.close()  # an in-process store keeps its folder locked until closed
            if isinstance(exc, MediaIndexError) or not isinstance(exc, Exception):
                raise
            raise ServerUnavailableError(f"cannot use the Qdrant collection {collection!r} at {url}: {exc}") from exc

    def _ensure_collection(self, threshold: int, m: int, ef: int) -> None:
        from qdrant_client import models

        if self._client.collection_exists(self.collection):
            info = self._client.get_collection(self.collection)
            have = info.config.params.vectors or {}
            have = have if isinstance(have, dict) else {"": have}
            sparse = info.config.params.sparse_vectors or {}
            problems = [f"{n} ({d}-d)" for n, d in self.dims.items() if n not in have or have[n].size != d]
            if SPARSE_VECTOR not in sparse:
                problems.append(f"{SPARSE_VECTOR} (sparse)")
            if problems:
                raise IndexSchemaError(
                    f"the Qdrant collection {self.collection!r} at {self.url} lacks the vectors "
                    f"{', '.join(problems)}: use another collection (index.collection) or delete it with "
                    "`mediaindex index reset` and ingest again"
                )
            have_indexes = set(info.payload_schema or {})
        else:
            threshold_kb = max(1, threshold * self.dims[TEXT_VECTOR] * 4 // 1024)
            self._client.create_collection(
                self.collection,
                vectors_config={n: models.VectorParams(size=d, distance=models.Distance.COSINE)
                                for n, d in self.dims.items()},
                sparse_vectors_config={SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                hnsw_config=models.HnswConfigDiff(m=m, ef_construct=ef, full_scan_threshold=threshold_kb),
                optimizers_config=models.OptimizersConfigDiff(indexing_threshold=threshold_kb),
            )
            have_indexes = set()
        for name, kind in PAYLOAD_INDEXES.items():
            if name in have_indexes or self._local:
                continue  # the in-process mode has no payload indexes (it scans)
            schema = (models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD) if kind == "keyword"
                      else models.PayloadSchemaType.FLOAT)
            self._client.create_payload_index(self.collection, name, field_schema=schema, wait=True)

    @property
    def _local(self) -> bool:
        return self.url == ":memory:" or self.url.startswith("local:")

    # -- writing ---------------------------------------------------------------------------------

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None:
        from qdrant_client import models

        if not segments:
            return
        vectors = check_vectors(segments, vectors, self.dims)
        for part in batches(len(segments)):
            points = []
            for i in range(part.start, part.stop):
                seg = segments[i]
                words = self.encoder.document(word_text(seg))
                # A segment with neither text nor classes (`Segment.has_text_vector`) is found by picture only.
                named: dict[str, Any] = {TEXT_VECTOR: vectors[i].tolist()} if seg.has_text_vector else {}
                named.update({k: list(map(float, v)) for k, v in seg.vectors.items() if k in self.dims})
                if words:
                    named[SPARSE_VECTOR] = models.SparseVector(indices=words.indices, values=words.values)
                points.append(models.PointStruct(id=seg.point_id(i), vector=named, payload=point_payload(seg)))
            self._client.upsert(self.collection, points=points, wait=True)

    def delete_video(self, video_id: str) -> None:
        from qdrant_client import models

        self._client.delete(self.collection, wait=True, points_selector=models.FilterSelector(
            filter=self._filter(SearchFilters(video_id=video_id))))

    def set_source(self, video_id: str, source: str) -> None:
        from qdrant_client import models

        self._client.set_payload(self.collection, {"source": source}, wait=True, points=models.FilterSelector(
            filter=self._filter(SearchFilters(video_id=video_id))))

    def set_metadata(self, video_id: str, values: dict[str, Any]) -> None:
        from qdrant_client import models

        self._client.set_payload(self.collection, values, key="extra", wait=True, points=models.FilterSelector(
            filter=self._filter(SearchFilters(video_id=video_id))))

    def delete_other_videos(self, keep: list[str]) -> None:
        from qdrant_client import models

        others = models.Filter(must_not=[models.FieldCondition(key="video_id", match=models.MatchAny(any=keep))]) \
            if keep else models.Filter()
        self._client.delete(self.collection, wait=True, points_selector=models.FilterSelector(filter=others))

    # -- reading ---------------------------------------------------------------------------------

    @staticmethod
    def _filter(filters: SearchFilters | None) -> models.Filter | None:
        from qdrant_client import models

        def condition(c: Condition) -> Any:
            if c.kind == "equals":
                return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
            if c.kind == "prefix":
                return models.FieldCondition(key=c.key, match=models.MatchPrefix(prefix=c.value))
            if c.kind == "any":
                return models.FieldCondition(key=c.key, match=models.MatchAny(any=c.value))
            if c.kind == "one_of":
                return models.Filter(should=[
                    models.FieldCondition(key=c.key, match=models.MatchValue(value=v)) if isinstance(v, str | bool)
                    else models.FieldCondition(key=c.key, range=models.Range(gte=v, lte=v)) for v in c.value])
            bound = {"gte": c.value} if c.kind == "at_least" else {"lte": c.value}
            return models.FieldCondition(key=c.key, range=models.Range(**bound))

        must = [condition(c) for c in conditions(filters)]
        return models.Filter(must=must) if must else None

    def segments_of(self, video_id: str, modality: str | None = None) -> list[dict[str, Any]]:
        """Every stored segment payload of one video (optionally one modality), in time order."""
        flt = self._filter(SearchFilters(video_id=video_id, modality=modality))
        return payloads_in_time_order(lambda offset: self._client.scroll(
            self.collection, scroll_filter=flt, limit=256, offset=offset, with_payload=True, with_vectors=False))

    @staticmethod
    def _vector_of(r: Retriever) -> Any:
        from qdrant_client import models

        if isinstance(r.vector, SparseVec):
            return models.SparseVector(indices=r.vector.indices, values=r.vector.values)
        return np.asarray(r.vector, dtype=np.float32).tolist()

    def query(
        self, retrievers: list[Retriever], limit: int, filters: SearchFilters | None = None,
        candidates: int = 100, rrf_k: int = 60, with_vectors: list[str] | None = None,
    ) -> list[ScoredHit]:
        from qdrant_client import models

        check_retrievers(retrievers, self.dims)
        flt = self._filter(filters)
        common: dict[str, Any] = {"query_filter": flt, "limit": limit, "with_payload": HIT_FIELDS,
                  "with_vectors": list(with_vectors) if with_vectors else False}
        try:
            if len(retrievers) == 1:
                r = retrievers[0]
                result = self._client.query_points(self.collection, query=self._vector_of(r), using=r.using, **common)
            else:
                prefetch = [models.Prefetch(query=self._vector_of(r), using=r.using, filter=flt, limit=candidates)
                            for r in retrievers]
                fusion = models.RrfQuery(rrf=models.Rrf(k=rrf_k, weights=[r.weight for r in retrievers]))
                result = self._client.query_points(self.collection, prefetch=prefetch, query=fusion, **common)
        except Exception as exc:
            raise ServerUnavailableError(f"search on the Qdrant collection {self.collection!r} failed: {exc}") from exc
        return [scored_hit(p.payload, p.score, p.vector) for p in result.points]

    def count(self, filters: SearchFilters | None = None) -> int:
        return int(self._client.count(self.collection, count_filter=self._filter(filters), exact=True).count)

    # -- maintenance -----------------------------------------------------------------------------

    def optimize(self) -> bool:
        """A server builds its HNSW graphs in the background once segments pass the threshold."""
        return False

    def stats(self) -> dict[str, Any]:
        info = self._client.get_collection(self.collection)
        return {
            "backend": "server", "points": int(info.points_count or 0), "segments": int(info.segments_count or 0),
            "indexed_vectors": int(info.indexed_vectors_count or 0),
            "vectors": sorted(self.dims) + [SPARSE_VECTOR], "payload_indexes": sorted(info.payload_schema or {}),
            "status": str(info.status.value if hasattr(info.status, "value") else info.status),
            "location": f"{self.url} collection {self.collection}",
        }

    def drop(self) -> None:
        self._client.delete_collection(self.collection)

    def close(self) -> None:
        self._client.close()
