"""One handle on an index: the vector store (embedded or on a server), the catalog and the schema check."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mediaindex.config import IndexSettings, Settings
from mediaindex.errors import ConfigError
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.filters import SearchFilters
from mediaindex.index.schema import check_or_write
from mediaindex.index.sparse import SparseEncoder
from mediaindex.index.store import TEXT_VECTOR, VectorStore
from mediaindex.segments import Segment


def open_store(settings: IndexSettings, index_dir, dims: dict[str, int], encoder: SparseEncoder) -> VectorStore:
    tuning = {"hnsw_threshold": settings.hnsw_threshold, "hnsw_m": settings.hnsw_m,
              "hnsw_ef_construct": settings.hnsw_ef_construct}
    if settings.backend == "server":
        from mediaindex.index.server_store import ServerStore

        if not settings.url:
            raise ConfigError("index.backend is 'server' but index.url is not set (MEDIAINDEX_INDEX__URL)")
        return ServerStore(settings.url, settings.collection, dims, encoder, api_key=settings.api_key,
                           timeout=settings.timeout, **tuning)
    from mediaindex.index.edge_store import EdgeStore

    return EdgeStore(index_dir / "qdrant", dims, encoder, **tuning)


def store_location(settings: IndexSettings) -> str | None:
    return f"{settings.url}#{settings.collection}" if settings.backend == "server" else None


class MediaIndex:
    def __init__(
        self, settings: Settings, text_dim: int, embedder_name: str, extra_dims: dict[str, int] | None = None
    ) -> None:
        self.dir = settings.index_dir
        self.settings = settings.index
        if extra_dims is None:  # the vectors the configured vision models make
            from mediaindex.models.vision import vector_dims

            extra_dims = vector_dims(settings.vision)
        extra = {k: v for k, v in extra_dims.items() if k != TEXT_VECTOR}
        extra = check_or_write(self.dir, text_dim, embedder_name, settings.index.backend,
                               store_location(settings.index), extra)
        self.sparse = SparseEncoder()
        self.catalog = Catalog(self.dir / "catalog.db")
        try:
            self.store: VectorStore = open_store(settings.index, self.dir, {TEXT_VECTOR: text_dim, **extra},
                                                 self.sparse)
        except BaseException:
            self.catalog.close()
            raise

    def replace_video(self, record: VideoRecord, segments: list[Segment], vectors: np.ndarray) -> None:
        """Swap in a file's new segments.

        The catalog entry goes first and comes back last: if the process dies in between, the file is
        simply not indexed and the next ingest redoes it; point ids are stable, so nothing duplicates.
        """
        previous = self.catalog.by_source(record.source)
        if previous is not None:
            self.catalog.delete(previous.video_id)
            self.store.delete_video(previous.video_id)
        self.catalog.delete(record.video_id)
        self.store.delete_video(record.video_id)
        self.store.upsert(segments, vectors)
        self.catalog.upsert(record)

    def add_segments(self, video_id: str, segments: list[Segment], vectors: np.ndarray) -> None:
        """Add segments to an indexed video (its summary and chapters) and count them in its catalog entry.

        The count is read from the store, so it is exact whenever this finishes; the points have stable ids
        (video, modality, position), so adding the same segments again replaces them instead of duplicating.
        """
        record = self.catalog.get(video_id)
        if record is None:
            raise KeyError(f"video {video_id} is not in the index")
        self.store.upsert(segments, vectors)
        self.catalog.upsert(replace(record, segments=self.store.count(SearchFilters(video_id=video_id))))

    def remove_video(self, video_id: str) -> None:
        self.catalog.delete(video_id)
        self.store.delete_video(video_id)

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.catalog.close()

    def __enter__(self) -> MediaIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
