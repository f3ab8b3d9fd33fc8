"""One handle on an index: the vector store (embedded or on a server), the catalog and the schema check."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mediaindex.config import IndexSettings, Settings
from mediaindex.errors import ConfigError, IndexBusyError, MediaIndexError
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.filters import SearchFilters, metadata_spellings
from mediaindex.index.holder import Holder, read_holder
from mediaindex.index.integrity import reconcile
from mediaindex.index.per_thread_catalog import PerThreadCatalog
from mediaindex.index.reset import finish_reset
from mediaindex.index.schema import SCHEMA_FILE, check_or_write
from mediaindex.index.shared_store import READ, Access, SharedStore
from mediaindex.index.sparse import SparseEncoder
from mediaindex.index.store import TEXT_VECTOR, VectorStore
from mediaindex.index.vocabulary import WORDED, words_of
from mediaindex.segments import STAGE_KEYS, Segment, given_metadata


def open_store(settings: IndexSettings, index_dir, dims: dict[str, int], encoder: SparseEncoder,
               access: Access = READ) -> VectorStore:
    tuning = {"hnsw_threshold": settings.hnsw_threshold, "hnsw_m": settings.hnsw_m,
              "hnsw_ef_construct": settings.hnsw_ef_construct}
    if settings.backend == "server":
        from mediaindex.index.server_store import ServerStore

        if not settings.url:
            raise ConfigError("index.backend is 'server' but index.url is not set (MEDIAINDEX_INDEX__URL)")
        return ServerStore(settings.url, settings.collection, dims, encoder, api_key=settings.api_key,
                           timeout=settings.timeout, **tuning)
    from mediaindex.index.edge_store import EdgeStore

    # One process opens the embedded store's files; the others read through it (index/shared_store.py).
    return SharedStore(index_dir, lambda: EdgeStore(index_dir / "qdrant", dims, encoder, **tuning), access)


def store_location(settings: IndexSettings) -> str | None:
    return f"{settings.url}#{settings.collection}" if settings.backend == "server" else None


class IndexMissingError(MediaIndexError):
    """A reading command was pointed at a folder that holds no index."""


class IndexFolderError(MediaIndexError):
    """The index's path cannot be its folder: a file is there, or the folder cannot be made."""


def make_index_folder(index_dir: Path) -> None:
    """The index's folder, made where it is missing; a clear error where it cannot be."""
    if index_dir.exists() and not index_dir.is_dir():
        raise IndexFolderError(f"the index path {index_dir} is a file, not a folder: give --index (or "
                               "MEDIAINDEX_INDEX_DIR) a folder")
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IndexFolderError(f"cannot make the index folder {index_dir} ({exc.strerror or exc}): give --index (or "
                               "MEDIAINDEX_INDEX_DIR) a folder that can be written") from exc


def index_exists(index_dir: Path) -> bool:
    return (Path(index_dir) / SCHEMA_FILE).exists()


def require_index(index_dir: Path) -> None:
    """Reading commands never create an index: a folder that holds none is a clear error."""
    if not index_exists(index_dir):
        raise IndexMissingError(f"no index at {index_dir}: run `mediaindex ingest PATH` first")


class IndexHeldError(IndexBusyError):
    """Another live process holds the index; `holder` says which (and where a server answers)."""

    def __init__(self, index_dir: Path, holder: Holder | None) -> None:
        who = holder.describe() if holder else "another process"
        super().__init__(f"the index at {index_dir} is held by {who}; try again when it has finished"
                         + (", or send the request to that server" if holder and holder.url else ""))
        self.holder = holder


def open_index(settings: Settings, text_dim: int, embedder_name: str, extra_dims: dict[str, int] | None = None,
               *, must_exist: bool = False, thread_safe: bool = False, access: Access = READ,
               repair: bool = False) -> MediaIndex:
    """The one way into an index: typed errors for a missing index, one held by another process (naming
    it), or one built with other image vectors; `thread_safe` gives each thread its own catalog
    connection (a server's request and job threads); `access` says whether to read through another
    process that holds the index, or wait for it to finish (a writer). A reset stopped midway is finished
    first; vectors and catalog are checked to agree (see integrity.py) by the process that holds the index:
    `repair` (an ingest) forgets files whose segments were lost so that they are indexed again, else such an
    index is refused with the fix."""
    index_dir = Path(settings.index_dir)
    if not must_exist:
        make_index_folder(index_dir)
    holder = read_holder(index_dir)
    if holder is not None and holder.url and settings.index.backend != "server":
        raise IndexHeldError(index_dir, holder)  # a server holds it for as long as it runs: do not wait
    if holder is None:
        finish_reset(index_dir)
    if must_exist:
        require_index(index_dir)
    try:
        return MediaIndex(settings, text_dim, embedder_name, extra_dims=extra_dims, thread_safe=thread_safe,
                          access=access, repair=repair)
    except IndexBusyError as exc:
        raise IndexHeldError(index_dir, read_holder(index_dir)) from exc
    # Every other refusal arrives typed: the stores turn the vector engines' errors into MediaIndexErrors
    # (IndexSchemaError for vectors other than configured, IndexCorruptError, ServerUnavailableError).


class MediaIndex:
    def __init__(
        self, settings: Settings, text_dim: int, embedder_name: str, extra_dims: dict[str, int] | None = None,
        thread_safe: bool = False, access: Access = READ, repair: bool = False,
    ) -> None:
        self.dir = settings.index_dir
        self.thumbs_dir = settings.thumbs_dir
        self.settings = settings.index
        if extra_dims is None:  # the vectors the configured vision models make
            from mediaindex.models.vision import vector_dims

            extra_dims = vector_dims(settings.vision)
        extra = {k: v for k, v in extra_dims.items() if k != TEXT_VECTOR}
        extra = check_or_write(self.dir, text_dim, embedder_name, settings.index.backend,
                               store_location(settings.index), extra)
        self.sparse = SparseEncoder()
        # The image classifier whose labels the visual segments carry (its pooled feature is the "frame" vector).
        self.classifier = settings.vision.classifier if settings.vision.enabled and "frame" in extra else None
        self.catalog: Catalog | PerThreadCatalog = (PerThreadCatalog if thread_safe else Catalog)(self.dir / "catalog.db")
        try:
            self.store: VectorStore = open_store(settings.index, self.dir, {TEXT_VECTOR: text_dim, **extra},
                                                 self.sparse, access)
        except BaseException:
            self.catalog.close()
            raise
        try:
            # Only the process that holds the store checks (and repairs) it: one reading through a running
            # ingest would see a file's catalog entry and its points disagree for a moment.
            self.agreement = reconcile(self.dir, self.catalog, self.store, forget_damaged=repair) \
                if getattr(self.store, "holds", True) else None
        except BaseException:
            try:
                self.store.close()
            except MediaIndexError:
                pass  # the reason the index is refused is the error raised above
            finally:
                self.catalog.close()
            raise
        self._vocabulary: frozenset[str] | None = None
        self._vocabulary_version = -1

    def advertise(self, url: str) -> None:
        """Record where the server holding this index answers (commands run beside it go through it)."""
        if isinstance(self.store, SharedStore):
            self.store.advertise(url)

    def replace_video(self, record: VideoRecord, segments: list[Segment], vectors: np.ndarray) -> None:
        """Swap in a file's new segments, so that a process dying at any point leaves its old state or its new one.

        Changed bytes make a new video id, so the new points never overwrite the old ones: they are written
        first, the catalog entry then switches to them in one transaction, and the old points go last. Points
        of an entry the catalog does not hold (a write stopped before or after the switch) are removed when
        the index next opens. Rewriting the same bytes reuses the same point ids; then the entry goes first
        and comes back last: a stop in between leaves the file not indexed and the next ingest redoes it.
        """
        previous = self.catalog.by_source(record.source)
        if self.catalog.get(record.video_id) is not None:
            self.catalog.delete(record.video_id)
        self.store.delete_video(record.video_id)  # the same bytes indexed before, or a stopped write's points
        self.store.upsert(segments, vectors)
        self.catalog.upsert(record)
        self.catalog.set_words(record.video_id, words_of(s.text for s in segments if s.modality in WORDED))
        if previous is not None and previous.video_id != record.video_id:
            self.catalog.delete(previous.video_id)  # its row went with the switch; this drops its words
            self.store.delete_video(previous.video_id)
            self._delete_thumbnails(previous.video_id)
        self._vocabulary = None

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

    def move_video(self, video_id: str, source: str, mtime_ns: int) -> None:
        """Point an indexed file at its new path (the same bytes): its segments first, then its entry, so a stop
        in between leaves the old entry, which the next ingest of the new path moves again."""
        self.store.set_source(video_id, source)
        self.catalog.move(video_id, source, mtime_ns)

    def add_metadata(self, video_id: str, metadata: dict[str, Any]) -> None:
        """Give an indexed file these metadata values (its other keys kept): its segments first (keys its stages
        keep stay theirs), then its entry, so a stop in between leaves the old entry, which the next ingest with
        this metadata sets again."""
        record = self.catalog.get(video_id)
        if record is None:
            return
        values = {k: v for k, v in metadata.items() if k not in STAGE_KEYS}
        if values:
            self.store.set_metadata(video_id, values)  # a key taken away (None) is null there: it matches nothing
        self.catalog.upsert(replace(record, metadata=given_metadata({**record.metadata, **metadata})))

    def spelled(self, filters: SearchFilters | None) -> SearchFilters | None:
        """The filters with the other cases in which the files spell their metadata values (text matches in any
        case; the engine compares it exactly)."""
        if filters is None or not filters.metadata:
            return filters
        return replace(filters, spellings=metadata_spellings(self.catalog.metadata_texts, filters.metadata))

    def remove_video(self, video_id: str) -> None:
        """Take a file out of the index: its entry first (a stop after it leaves points the next open removes),
        then its segments (summary and chapters with them) and its thumbnails."""
        self.catalog.delete(video_id)
        self.store.delete_video(video_id)
        self._delete_thumbnails(video_id)
        self._vocabulary = None

    def _delete_thumbnails(self, video_id: str) -> None:
        shutil.rmtree(self.thumbs_dir / video_id, ignore_errors=True)

    def vocabulary(self) -> frozenset[str]:
        """The words of the archive's speech and on-screen text (for sound-alike names), kept until the
        catalog changes; files indexed before words were recorded get theirs from their stored segments."""
        version = self.catalog.version()
        if self._vocabulary is None or version != self._vocabulary_version:
            for video_id in self.catalog.without_words():
                texts = [p.get("text") or "" for p in self.store.segments_of(video_id) if p.get("modality") in WORDED]
                self.catalog.set_words(video_id, words_of(texts))
            self._vocabulary, self._vocabulary_version = self.catalog.vocabulary(), self.catalog.version()
        return self._vocabulary

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.catalog.close()

    def __enter__(self) -> MediaIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
