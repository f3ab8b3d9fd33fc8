"""How a user names indexed files: a video id or its start, the path or folder they were ingested from, a name."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from mediaindex.errors import MediaIndexError


class Listed(Protocol):
    """An indexed file as a listing shows it: its id and the path it was ingested from."""

    @property
    def video_id(self) -> str: ...

    @property
    def source(self) -> str: ...


L = TypeVar("L", bound=Listed)


class NoSuchFileError(MediaIndexError):
    """A reference names no indexed file, or names several where one was meant."""


def _shown(ref: str, limit: int = 80) -> str:
    """A reference as an error message quotes it: long ones cut (a pasted transcript is not a file name)."""
    return repr(ref if len(ref) <= limit else ref[: limit - 1] + "…")


def files_named(records: Sequence[L], ref: str, *, folders: bool = False) -> tuple[list[L], bool]:
    """The indexed files a reference names, and whether it was a guess. In order of trust: the video id; the
    path a file was ingested from; with `folders`, every file under a folder (on disk or gone from it); then,
    guessed, a start of video ids or a file name, either of which may name several files."""
    ref = ref.strip()
    if not ref:
        return [], False
    if found := [r for r in records if r.video_id == ref]:
        return found, False
    path = str(Path(ref).expanduser().resolve())
    if found := [r for r in records if r.source == path]:
        return found, False
    if folders and (found := [r for r in records if r.source.startswith(path.rstrip(os.sep) + os.sep)]):
        return found, False
    if found := [r for r in records if r.video_id.startswith(ref)]:
        return found, True
    return [r for r in records if Path(r.source).name == ref], True


def one_file_named(records: Sequence[L], ref: str) -> L | None:
    """The one indexed file a reference names (an id or its start, the path it was ingested from, a name), or None;
    a guess that fits several files is refused, naming them."""
    found, _ = files_named(records, ref)
    if len(found) > 1:
        raise _several(ref, found)
    return found[0] if found else None


def _several(ref: str, found: Sequence[Listed]) -> NoSuchFileError:
    shown = ", ".join(f"{r.source} ({r.video_id})" for r in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return NoSuchFileError(f"{_shown(ref)} names {len(found)} indexed files: {shown}{more}; give the path or the "
                           "video id")


def under_folders(records: Sequence[L], paths: Sequence[str | Path]) -> list[L]:
    """The files ingested from under those of these paths that are folders, in listing order."""
    chosen = {r.video_id for path in paths if Path(path).is_dir()
              for r in files_named(records, str(path), folders=True)[0]}
    return [r for r in records if r.video_id in chosen]


def select_files(records: Sequence[L], refs: Sequence[str], *, missing: bool = False) -> list[L]:
    """Every file the references name (ids, paths, folders, names), and with `missing` every file no longer at
    its path, in listing order. A reference that names nothing, or guesses at several, is refused before
    anything is chosen."""
    chosen: set[str] = set()
    for ref in refs:
        found, guessed = files_named(records, ref, folders=True)
        if not found:
            raise NoSuchFileError(f"nothing in the index is named {_shown(ref)} (give a video id or its start, the path "
                                  "or folder a file was ingested from, or a file name)")
        if guessed and len(found) > 1:
            raise _several(ref, found)
        chosen.update(r.video_id for r in found)
    if missing:
        chosen.update(r.video_id for r in records if not os.path.exists(r.source))
    return [r for r in records if r.video_id in chosen]
