"""Free space on the disk that holds an index, checked before the vector engine writes.

The engine memory-maps its files and sizes them ahead with holes; a write into a hole on a full disk does
not fail with an error, it kills the process (SIGBUS). So a write is refused, with a clear message, unless
the disk can take every hole the engine may fill plus a margin.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mediaindex.errors import IndexDiskFullError

MARGIN_BYTES = 32 * 1024**2  # the WAL, SQLite journals and thumbnails written beside the vectors
_FULL_TEXTS = ("No space left on device", "database or disk is full", "Disk quota exceeded", "os error 28")


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the disk holding `path` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def holes(folder: Path) -> int:
    """Bytes the files under `folder` are sized for but do not occupy yet (what later writes may fill)."""
    total = 0
    if not folder.is_dir():
        return 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def disk_full_message(index_dir: Path, free: int | None = None, need: int | None = None) -> str:
    free = free_bytes(index_dir) if free is None else free
    wanted = f" (it needs about {need / 1e6:.0f} MB to write safely)" if need is not None else ""
    return (f"the disk holding the index at {index_dir} has {free / 1e6:.0f} MB free{wanted}; nothing was "
            "written. Free some space and run the command again (the index is kept as it was)")


def require_free_space(index_dir: Path, store_dir: Path, extra: int = 0) -> None:
    """Refuse to write unless the disk can take the store's holes, `extra` new bytes and the margin."""
    need = holes(store_dir) + extra + MARGIN_BYTES
    free = free_bytes(index_dir)
    if free < need:
        raise IndexDiskFullError(disk_full_message(index_dir, free, need))


def is_disk_full(exc: BaseException) -> bool:
    """Whether an error (an OSError, SQLite's or the engine's) says the disk is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(text in str(exc) for text in _FULL_TEXTS)
