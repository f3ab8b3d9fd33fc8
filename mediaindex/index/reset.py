"""Deleting an index so that a kill at any moment leaves either the old index or none.

`reset_index` first records, atomically, that a reset was asked for; then it deletes the schema (from then
on the folder no longer reads as an index), the catalog, the vectors and the thumbnails, and removes the
record last. A reset killed midway leaves the record: the next open of the folder finishes the deletion
before anything reads it, so vectors and catalog never survive one another.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

RESET_MARKER = "reset.pending"
# The schema goes first: a folder without it is no index to any reading command.
INDEX_PARTS = ("schema.json", "catalog.db", "catalog.db-journal", "catalog.db-wal", "catalog.db-shm", "qdrant",
               "thumbs")


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reset_pending(index_dir: Path) -> bool:
    """Whether a reset of this folder was asked for and has not finished."""
    return (index_dir / RESET_MARKER).exists()


def reset_index(index_dir: Path) -> None:
    """Delete the index in `index_dir` (its job records and API keys stay)."""
    marker = index_dir / RESET_MARKER
    tmp = index_dir / f".{RESET_MARKER}.{os.getpid()}"
    tmp.write_text("a reset of this index was asked for; the next open finishes it\n")
    os.replace(tmp, marker)
    _sync_dir(index_dir)
    finish_reset(index_dir)


def finish_reset(index_dir: Path) -> bool:
    """Finish a reset that was stopped midway; True when there was one."""
    marker = index_dir / RESET_MARKER
    if not marker.exists():
        return False
    for name in INDEX_PARTS:
        target = index_dir / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    _sync_dir(index_dir)
    marker.unlink()
    _sync_dir(index_dir)
    return True
