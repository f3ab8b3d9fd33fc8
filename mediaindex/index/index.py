"""One handle on an index directory: the vector store, the catalog and the schema check."""

from __future__ import annotations

import numpy as np

from mediaindex.config import Settings
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.schema import check_or_write
from mediaindex.index.store import TEXT_VECTOR, EdgeStore, VectorStore
from mediaindex.segments import Segment


class MediaIndex:
    def __init__(
        self, settings: Settings, text_dim: int, embedder_name: str, extra_dims: dict[str, int] | None = None
    ) -> None:
        self.dir = settings.index_dir
        check_or_write(self.dir, text_dim, embedder_name)
        self.store: VectorStore = EdgeStore(self.dir / "qdrant", {TEXT_VECTOR: text_dim, **(extra_dims or {})})
        self.catalog = Catalog(self.dir / "catalog.db")

    def replace_video(self, record: VideoRecord, segments: list[Segment], vectors: np.ndarray) -> None:
        """Swap in a file's new segments: old points for its source (or content) go first."""
        previous = self.catalog.by_source(record.source)
        if previous is not None:
            self.store.delete_video(previous.video_id)
        self.store.delete_video(record.video_id)
        self.store.upsert(segments, vectors)
        self.catalog.upsert(record)

    def remove_video(self, video_id: str) -> None:
        self.store.delete_video(video_id)
        self.catalog.delete(video_id)

    def close(self) -> None:
        self.store.close()
        self.catalog.close()

    def __enter__(self) -> MediaIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
