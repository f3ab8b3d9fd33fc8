"""SHA-256 digests of the weight files a load reads, computed in full only when a file changed since its last check.

Hashing a converted or packed model at every load costs 0.3–1 s, a tenth of a one-shot `search`. Once a file's bytes
have been read and match, its identity (size, inode, modification and change times) is noted beside it in
`.NAME.sha256`; a later check of the same digest trusts a file that still has that identity. Writing, truncating,
replacing or copying a file changes that identity (a change time cannot be set back), so the check then reads the
file again. A file changed in the last two seconds is not noted: a write in the same clock tick as the check could
leave its times as they were. What no note can see is damage below the filesystem.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

SETTLED_NS = 2_000_000_000  # a file younger than this is read in full at every check


def file_sha256(path: Path) -> str:
    with open(path, "rb") as src:
        return hashlib.file_digest(src, "sha256").hexdigest()


def _note_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns]


def has_sha256(path: Path, want: str) -> bool:
    """Whether `path` is a file whose SHA-256 is `want` (False where it cannot be read)."""
    try:
        before = path.stat()
    except OSError:
        return False
    with contextlib.suppress(OSError, ValueError):
        if json.loads(_note_path(path).read_text(encoding="utf-8")) == {"sha256": want, "file": _identity(before)}:
            return True
    try:
        if file_sha256(path) != want:
            return False
        after = path.stat()
    except OSError:
        return False
    if _identity(after) == _identity(before) and time.time_ns() - after.st_mtime_ns > SETTLED_NS:
        _write_note(path, {"sha256": want, "file": _identity(after)})
    return True


def _write_note(path: Path, note: dict[str, object]) -> None:
    """Best effort: a folder that cannot be written only means the next check reads the file again."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(note, out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, _note_path(path))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
