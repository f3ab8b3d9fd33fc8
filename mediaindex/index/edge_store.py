"""Qdrant's engine in-process (qdrant-edge), on disk under the index directory; no server needed.

HNSW policy: segments stay plain (exact search) until `optimize()` runs, which builds graphs only for
segments above the configured threshold. Nothing here optimizes implicitly: a search never blocks on
an index build.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mediaindex.errors import (
    IndexBusyError,
    IndexCorruptError,
    IndexDiskFullError,
    IndexSchemaError,
    MediaIndexError,
)
from mediaindex.index.diskspace import MARGIN_BYTES, disk_full_message, is_disk_full, require_free_space
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
    check_retrievers,
    check_vectors,
    payloads_in_time_order,
    point_payload,
    scored_hit,
    word_text,
)
from mediaindex.segments import Segment

if TYPE_CHECKING:
    import qdrant_edge

LOCK_WAIT = 5.0  # seconds to wait for another process that holds the shard (e.g. a short write)


def _kb(points: int, dim: int) -> int:
    return max(1, points * dim * 4 // 1024)


def corrupt_message(path: Path, why: str) -> str:
    """What a user reads when the engine cannot read its files: which store, what it said, and the fix."""
    return (f"the vector store at {path} cannot be read ({why}): its files are damaged; nothing was changed. "
            f"Restore the index folder {path.parent} from a backup, or run `mediaindex index reset --index "
            f"{path.parent}` and ingest again")


class EdgeStore(VectorStore):
    def __init__(
        self, path: Path, dims: dict[str, int], encoder: SparseEncoder | None = None,
        hnsw_threshold: int = 20_000, hnsw_m: int = 16, hnsw_ef_construct: int = 100,
    ) -> None:
        import qdrant_edge as q

        self.path = path
        self.dims = dict(dims)
        self.encoder = encoder or SparseEncoder()
        threshold_kb = _kb(hnsw_threshold, dims[TEXT_VECTOR])
        self._config = q.EdgeConfig(
            vectors={name: q.EdgeVectorParams(size=dim, distance=q.Distance.Cosine) for name, dim in dims.items()},
            sparse_vectors={SPARSE_VECTOR: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
            hnsw_config=q.HnswIndexConfig(m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=threshold_kb),
            optimizers=q.EdgeOptimizersConfig(indexing_threshold=threshold_kb),
        )
        # Opening writes (the engine replays and re-sizes its files): a full disk is refused before it.
        require_free_space(path.parent, path)
        with self._engine("opening it"):
            self._shard = self._open()
            self._ensure_payload_indexes()

    @contextlib.contextmanager
    def _engine(self, doing: str) -> Iterator[None]:
        """Every engine call: its untyped errors (and Rust panics, which are BaseExceptions) leave as typed ones."""
        try:
            yield
        except (MediaIndexError, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            if is_disk_full(exc):
                raise IndexDiskFullError(disk_full_message(self.path.parent)) from exc
            raise IndexCorruptError(corrupt_message(self.path, f"{doing}: {exc}")) from exc

    # -- opening ---------------------------------------------------------------------------------

    def _open(self) -> qdrant_edge.EdgeShard:
        import qdrant_edge as q

        if self.path.exists() and not self.path.is_dir():
            raise IndexCorruptError(
                f"{self.path} should be the vector store's folder but is a file; nothing was changed. "
                f"Run `mediaindex index reset --index {self.path.parent}` and ingest again"
            )
        if not self.path.exists() or not any(self.path.iterdir()):
            return q.EdgeShard.create(str(self.path), self._config)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                return q.EdgeShard.load(str(self.path), self._config)
            except Exception as exc:
                # qdrant_edge raises untyped errors: this is the one place their text is read, and they
                # leave it as typed ones (IndexBusyError, IndexSchemaError, IndexCorruptError).
                message = str(exc)
                if "WouldBlock" in message:
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    raise IndexBusyError(
                        f"the index at {self.path.parent} is open in another process (an ingest still running?); "
                        "try again when it has finished"
                    ) from exc
                if "ncompatible" in message:
                    return self._migrate(message)
                if is_disk_full(exc):
                    raise IndexDiskFullError(disk_full_message(self.path.parent)) from exc
                raise IndexCorruptError(corrupt_message(self.path, message)) from exc

    def _migrate(self, why: str) -> qdrant_edge.EdgeShard:
        """Add named vectors configured since the index was made; keep vectors no longer configured."""
        import qdrant_edge as q

        shard = q.EdgeShard.load(str(self.path))
        try:
            for name, dim in self.dims.items():
                if name == TEXT_VECTOR:
                    continue
                with contextlib.suppress(Exception):  # it exists already
                    shard.update(q.UpdateOperation.create_dense_vector(name, dim, q.Distance.Cosine))
            shard.flush()
        finally:
            shard.close()
        try:
            return q.EdgeShard.load(str(self.path), self._config)
        except Exception:  # the shard holds vectors no longer configured: use its own config
            try:
                return q.EdgeShard.load(str(self.path))
            except Exception as exc:
                raise IndexSchemaError(
                    f"the vector store at {self.path} does not match the configured vectors ({why}): run "
                    f"`mediaindex index reset --index {self.path.parent}` and ingest again"
                ) from exc

    def _ensure_payload_indexes(self) -> None:
        import qdrant_edge as q

        have = set(self._shard.info().payload_schema)
        for name, kind in PAYLOAD_INDEXES.items():
            if name in have:
                continue
            schema: q.PayloadSchemaType | q.PayloadSchemaParams
            if kind == "keyword":
                schema = q.KeywordIndexParams(prefix=name == "source")
            else:
                schema = q.PayloadSchemaType.Float
            self._shard.update(q.UpdateOperation.create_field_index(name, schema))

    # -- writing ---------------------------------------------------------------------------------

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None:
        import qdrant_edge as q

        if not segments:
            return
        vectors = check_vectors(segments, vectors, self.dims)
        points = []
        for i, seg in enumerate(segments):
            words = self.encoder.document(word_text(seg))
            # A segment with neither text nor classes (`Segment.has_text_vector`) is found by picture only.
            named: dict[str, Any] = {TEXT_VECTOR: vectors[i].tolist()} if seg.has_text_vector else {}
            named.update({k: list(map(float, v)) for k, v in seg.vectors.items() if k in self.dims})
            if words:
                named[SPARSE_VECTOR] = q.SparseVector(words.indices, words.values)
            points.append(q.Point(id=seg.point_id(i), vector=named, payload=point_payload(seg)))
        # Twice the raw vectors: the WAL holds them until they land in the segment files.
        require_free_space(self.path.parent, self.path, extra=2 * vectors.nbytes + 4096 * len(points))
        # One operation per call: a concurrent search sees a file's segments all or not at all.
        with self._engine("writing"):
            self._shard.update(q.UpdateOperation.upsert_points(points))
            self._shard.flush()

    def delete_video(self, video_id: str) -> None:

        # Durable through the write-ahead log once update() returns; segments are flushed by the next
        # upsert or on close (each flush costs an fsync, ~0.2 s).
        flt = self._filter(SearchFilters(video_id=video_id))
        assert flt is not None  # the video id is always a condition
        self._delete(flt)

    def set_source(self, video_id: str, source: str) -> None:
        import qdrant_edge as q

        flt = self._filter(SearchFilters(video_id=video_id))
        assert flt is not None  # the video id is always a condition
        require_free_space(self.path.parent, self.path, extra=MARGIN_BYTES)
        with self._engine("writing"):
            self._shard.update(q.UpdateOperation.set_payload_by_filter(flt, {"source": source}))
            self._shard.flush()

    def set_metadata(self, video_id: str, values: dict[str, Any]) -> None:
        import qdrant_edge as q

        flt = self._filter(SearchFilters(video_id=video_id))
        assert flt is not None  # the video id is always a condition
        require_free_space(self.path.parent, self.path, extra=MARGIN_BYTES)
        with self._engine("writing"):
            self._shard.update(q.UpdateOperation.set_payload_by_filter(flt, values, "extra"))
            self._shard.flush()

    def delete_other_videos(self, keep: list[str]) -> None:
        import qdrant_edge as q

        if keep:
            self._delete(q.Filter(must_not=[q.FieldCondition(key="video_id", match=q.MatchAny(keep))]))
        else:
            self._delete(q.Filter(must=[q.IsEmptyCondition(key="video_id")]))  # a point without one, or none
            self._delete(q.Filter(must_not=[q.IsEmptyCondition(key="video_id")]))  # every other point

    def _delete(self, flt: qdrant_edge.Filter) -> None:
        import qdrant_edge as q

        require_free_space(self.path.parent, self.path, extra=MARGIN_BYTES)
        with self._engine("deleting"):
            self._shard.update(q.UpdateOperation.delete_points_by_filter(flt))

    # -- reading ---------------------------------------------------------------------------------

    @staticmethod
    def _filter(filters: SearchFilters | None) -> qdrant_edge.Filter | None:
        import qdrant_edge as q

        def condition(c: Condition) -> Any:
            if c.kind == "equals":
                return q.FieldCondition(key=c.key, match=q.MatchValue(c.value))
            if c.kind == "prefix":
                return q.FieldCondition(key=c.key, match=q.MatchPrefix(c.value))
            if c.kind == "any":
                return q.FieldCondition(key=c.key, match=q.MatchAny(c.value))
            if c.kind == "one_of":
                # qdrant-edge reads a Python bool as the integer it also is (true would match 1); numpy's bool
                # reaches it as a boolean.
                return q.Filter(should=[q.FieldCondition(key=c.key, match=q.MatchValue(cast(Any, np.bool_(v))))
                                        if isinstance(v, bool) else
                                        q.FieldCondition(key=c.key, match=q.MatchValue(v)) if isinstance(v, str)
                                        else q.FieldCondition(key=c.key, range=q.RangeFloat(gte=v, lte=v))
                                        for v in c.value])
            bound = {"gte": c.value} if c.kind == "at_least" else {"lte": c.value}
            return q.FieldCondition(key=c.key, range=q.RangeFloat(**bound))

        must = [condition(c) for c in conditions(filters)]
        return q.Filter(must=must) if must else None

    def segments_of(self, video_id: str, modality: str | None = None) -> list[dict[str, Any]]:
        """Every stored segment payload of one video (optionally one modality), in time order."""
        import qdrant_edge as q

        flt = self._filter(SearchFilters(video_id=video_id, modality=modality))
        with self._engine("reading"):
            return payloads_in_time_order(lambda offset: self._shard.scroll(
                q.ScrollRequest(offset=offset, limit=256, filter=flt, with_payload=True, with_vector=False)))

    def _query_of(self, r: Retriever) -> qdrant_edge.Query:
        import qdrant_edge as q

        if isinstance(r.vector, SparseVec):
            return q.Query.Nearest(q.SparseVector(r.vector.indices, r.vector.values), using=r.using)
        return q.Query.Nearest(np.asarray(r.vector, dtype=np.float32).tolist(), using=r.using)

    def query(
        self, retrievers: list[Retriever], limit: int, filters: SearchFilters | None = None,
        candidates: int = 100, rrf_k: int = 60, with_vectors: list[str] | None = None,
    ) -> list[ScoredHit]:
        import qdrant_edge as q

        check_retrievers(retrievers, self.dims)
        flt = self._filter(filters)
        with_vector = list(with_vectors) if with_vectors else None
        payload = q.PayloadSelector.Include(HIT_FIELDS)
        if len(retrievers) == 1:
            request = q.QueryRequest(limit=limit, query=self._query_of(retrievers[0]), filter=flt,
                                     with_payload=payload, with_vector=with_vector)
        else:
            request = q.QueryRequest(
                limit=limit,
                prefetches=[q.Prefetch(limit=candidates, query=self._query_of(r), filter=flt) for r in retrievers],
                # Rrf subclasses Fusion at run time; the stubs declare it as a nested class only.
                query=q.Fusion.Rrf(k=rrf_k, weights=[r.weight for r in retrievers]),  # type: ignore[arg-type]
                filter=flt, with_payload=payload, with_vector=with_vector,
            )
        with self._engine("searching"):
            return [scored_hit(p.payload, p.score, p.vector) for p in self._shard.query(request)]

    def count(self, filters: SearchFilters | None = None) -> int:
        import qdrant_edge as q

        with self._engine("counting"):
            return int(self._shard.count(q.CountRequest(exact=True, filter=self._filter(filters))))

    # -- maintenance -----------------------------------------------------------------------------

    def optimize(self) -> bool:
        """Merge segments and build HNSW graphs for large ones; blocks (minutes at 100k+ points)."""
        require_free_space(self.path.parent, self.path, extra=MARGIN_BYTES)
        with self._engine("optimizing"):
            changed = bool(self._shard.optimize())
            self._shard.flush()
        return changed

    def stats(self) -> dict[str, Any]:
        with self._engine("reading its statistics"):
            info = self._shard.info()
        # Allocated blocks, not apparent sizes: the engine pre-sizes sparse files (WAL, mmaps).
        size = sum(f.stat().st_blocks * 512 for f in self.path.rglob("*") if f.is_file())
        return {
            "backend": "edge", "points": int(info.points_count), "segments": int(info.segments_count),
            "indexed_vectors": int(info.indexed_vectors_count), "vectors": sorted(self.dims) + [SPARSE_VECTOR],
            "payload_indexes": sorted(info.payload_schema), "disk_bytes": size, "location": str(self.path),
        }

    def close(self) -> None:
        with self._engine("closing"):
            try:
                self._shard.flush()
            finally:
                self._shard.close()
