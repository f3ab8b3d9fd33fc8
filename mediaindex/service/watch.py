"""Keeping an index in step with folders: which of their files changed since they were indexed.

A file is taken once it has stopped changing (the same size and modification time, and the same subtitle files
beside it, at two looks in a row), so a file still being copied in waits; each version of a file is taken once, so
one that cannot be indexed is not tried again until it changes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mediaindex.media.subtitles import subtitle_signature
from mediaindex.pipeline.inputs import plan_inputs

if TYPE_CHECKING:
    from mediaindex.service.archive import Archive

# Size, modification time (ns), and [name, size, mtime_ns] of each subtitle file beside it.
Version = tuple[int, int, tuple[tuple[str | int, ...], ...]]


def _subtitles(files: list[list[str | int]]) -> tuple[tuple[str | int, ...], ...]:
    return tuple(tuple(f) for f in files)


class FolderWatch:
    def __init__(self, archive: Archive, paths: Sequence[Path], include: Sequence[str] = (),
                 exclude: Sequence[str] = (), *, ingested: bool = True) -> None:
        """`ingested`: what is under the paths now was just given to an ingest; otherwise the first look offers
        every file the index does not hold as it is."""
        self.archive, self.paths, self.include, self.exclude = archive, list(paths), list(include), list(exclude)
        self.seen = self._files()
        self.taken = dict(self.seen) if ingested else {}
        self.gone = self._gone()
        self.settled = True  # every file was as it is at the look before

    def _files(self) -> dict[str, Version]:
        found: dict[str, Version] = {}
        for path, _ in plan_inputs(self.paths, (), self.include, self.exclude).files:
            try:
                stat = os.stat(path)
            except OSError:  # gone since the folder was read
                continue
            found[path] = (stat.st_size, stat.st_mtime_ns, _subtitles(subtitle_signature(Path(path))))
        return found

    def _gone(self) -> dict[str, int]:
        """The indexed files from under the paths that are gone from disk, and their sizes."""
        return {r.video_id: r.size for r in self.archive.missing(self.paths)}

    def look(self) -> list[str]:
        """The files, new or changed, that the index does not hold as they are now and that have not changed
        since the previous look; each is counted as taken. When an indexed file has gone, the files of its size
        that are not indexed are offered again: a copy of it takes its place."""
        now, gone = self._files(), self._gone()
        catalog = self.archive.index.catalog
        if sizes := {size for video_id, size in gone.items() if video_id not in self.gone}:
            self.taken = {p: v for p, v in self.taken.items() if v[0] not in sizes or catalog.by_source(p) is not None}
        ready = []
        for path, version in now.items():
            if self.seen.get(path) != version or self.taken.get(path) == version:
                continue  # still changing (or new since the previous look), or given to an ingest already
            record = catalog.by_source(path)
            if record is None or (record.size, record.mtime_ns,
                                  _subtitles(record.probe.get("subtitle_files") or [])) != version:
                ready.append(path)
        self.settled = all(self.seen.get(path) == version for path, version in now.items())
        self.seen, self.gone = now, gone
        self.taken.update((path, now[path]) for path in ready)
        return ready

    def untake(self, paths: Sequence[str]) -> None:
        """These files were not given to an ingest after all (the next look offers them again)."""
        for path in paths:
            self.taken.pop(path, None)
