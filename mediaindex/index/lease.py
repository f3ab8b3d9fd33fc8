"""The right to open an embedded index's vector files: one process at a time, decided before any is opened.

qdrant-edge's own lock is taken inside its files, and a second process that merely tries it (and is
refused) can break the process that writes. So every process first takes this lease, an exclusive
`flock` on a small file beside the vector store; only its holder opens the store, and every other
process reads through the holder (`index/read_service.py`) or waits. The kernel drops the lease when
its process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from mediaindex.errors import MediaIndexError

log = logging.getLogger(__name__)

LEASE_FILE = "holder.lock"


class IndexLease:
    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def try_take(cls, index_dir: Path) -> IndexLease | None:
        """The lease if no other process (or other open index in this one) holds it, else None."""
        path = index_dir / LEASE_FILE
        try:
            index_dir.mkdir(parents=True, exist_ok=True)
            # Not inherited by child processes (O_CLOEXEC): a lease must end with the process that took it.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise MediaIndexError(f"cannot open {path} ({exc.strerror or exc}): the index folder must be "
                                  "writable by this user") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise MediaIndexError(f"cannot lock {path} ({exc.strerror or exc}): keep the index on a local "
                                  "file system that supports locks") from exc
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock


WAITING_FILE = "holder.waiting"


class WaitingWriter:
    """Said by a writer while it waits for the lease (a shared `flock` on a second file), so that readers let
    it go first instead of taking the lease themselves when the holder ends: a long-lived reader (`serve`)
    would otherwise keep a waiting ingest out for as long as it runs."""

    def __init__(self, index_dir: Path) -> None:
        self._fd: int | None = None
        try:
            self._fd = os.open(index_dir / WAITING_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_SH)  # readers only look (briefly): this never waits long
        except OSError as exc:  # the writer still waits, only without going first
            log.warning("cannot say that a writer waits for the index: %s", exc)
            self.done()

    def done(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def writer_waiting(index_dir: Path) -> bool:
    """Whether some process waits to write this index."""
    try:
        fd = os.open(index_dir / WAITING_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # none has waited yet (or it cannot be read: the lease decides alone)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False
