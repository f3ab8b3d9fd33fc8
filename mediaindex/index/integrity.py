"""Vectors and catalog agree: checked each time an index opens, repaired where that loses nothing.

The catalog is the record of what is indexed: a file's entry is written after its segments, and removed
before them. So points of a file the catalog does not name are the leftovers of a write that did not
finish (the file is simply indexed again), and a file with more points than recorded had its summary
written without its count: both are repaired at once. A file with fewer points than its entry records
lost data the index cannot give back: reading commands refuse to answer from such an index and say how to
fix it; an ingest forgets those entries so that it indexes the files again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from mediaindex.errors import IndexCorruptError
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.filters import SearchFilters
from mediaindex.index.per_thread_catalog import PerThreadCatalog
from mediaindex.index.store import VectorStore

log = logging.getLogger(__name__)
NAMED = 3  # files named in a message; the rest are counted


@dataclass
class Agreement:
    orphan_points: int = 0  # points of files the catalog does not hold
    recounted: list[VideoRecord] = field(default_factory=list)  # more points than recorded
    damaged: list[VideoRecord] = field(default_factory=list)  # fewer points than recorded

    @property
    def whole(self) -> bool:
        return not (self.orphan_points or self.recounted or self.damaged)


def check_agreement(catalog: Catalog | PerThreadCatalog, store: VectorStore) -> Agreement:
    """Compare the catalog's segment counts with the store's points: one count when they agree, one per file
    when they do not."""
    records = catalog.all()
    total = store.count()
    if total == sum(r.segments for r in records):
        return Agreement()
    found = Agreement()
    counted = 0
    for r in records:
        n = store.count(SearchFilters(video_id=r.video_id))
        counted += n
        if n < r.segments:
            found.damaged.append(r)
        elif n > r.segments:
            found.recounted.append(replace(r, segments=n))
    found.orphan_points = total - counted
    return found


def _names(records: list[VideoRecord]) -> str:
    shown = ", ".join(Path(r.source).name for r in records[:NAMED])
    return shown + (f" and {len(records) - NAMED} more" if len(records) > NAMED else "")


def damage_message(index_dir: Path, damaged: list[VideoRecord], total: int) -> str:
    return (f"the index at {index_dir} lists {len(damaged)} of its {total} files whose segments are missing "
            f"from the vector store ({_names(damaged)}): its files were damaged or deleted. Restore the index "
            "folder from a backup, or run `mediaindex ingest` on those files to index them again (or "
            f"`mediaindex index reset --index {index_dir}` and ingest everything again)")


def reconcile(index_dir: Path, catalog: Catalog | PerThreadCatalog, store: VectorStore, forget_damaged: bool) -> Agreement:
    """Check and repair; files with missing segments raise IndexCorruptError unless `forget_damaged`, when
    their entries and remaining points are removed (an ingest then indexes them again)."""
    found = check_agreement(catalog, store)
    if found.whole:
        return found
    if found.damaged and not forget_damaged:
        raise IndexCorruptError(damage_message(index_dir, found.damaged, catalog.count()))
    if found.orphan_points:
        log.warning("index %s: removing %d segments of files not in the catalog (a write that did not finish)",
                    index_dir, found.orphan_points)
        store.delete_other_videos([r.video_id for r in catalog.all()])
    for r in found.recounted:
        catalog.upsert(r)
    for r in found.damaged:
        log.warning("index %s: %s lost segments; it will be indexed again", index_dir, r.source)
        catalog.delete(r.video_id)
        store.delete_video(r.video_id)
    return found
