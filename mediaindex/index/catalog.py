"""The catalog of indexed files (SQLite beside the vectors): what was indexed, from which bytes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediaindex.errors import IndexCorruptError, IndexDiskFullError, is_utf8
from mediaindex.index.diskspace import disk_full_message, is_disk_full
from mediaindex.segments import ANALYSIS_VERSION

_SCHEMA = """
CREATE TABLE IF NOT EXISTS videos (
    video_id TEXT PRIMARY KEY,
    source TEXT UNIQUE NOT NULL,
    content_hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    duration REAL,
    language TEXT,
    segments INTEGER NOT NULL,
    probe TEXT,
    indexed_at REAL NOT NULL,
    analysis INTEGER NOT NULL DEFAULT 1,
    metadata TEXT NOT NULL DEFAULT '{}'
);
-- The words of each file's speech and on-screen text (index.vocabulary), for sound-alike names; a file
-- is in `worded` once its words are recorded (files indexed before this table get them on first use).
CREATE TABLE IF NOT EXISTS words (
    video_id TEXT NOT NULL,
    word TEXT NOT NULL,
    PRIMARY KEY (video_id, word)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS worded (video_id TEXT PRIMARY KEY);
-- A new path's bytes are compared only with files of its size (a moved or copied file).
CREATE INDEX IF NOT EXISTS videos_by_size ON videos (size);
"""


def content_hash(path: Path, chunk: int = 8 * 1024**2) -> str:
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def video_id_for(hash_hex: str) -> str:
    return hash_hex[:16]


@dataclass(frozen=True)
class VideoRecord:
    video_id: str
    source: str
    content_hash: str
    size: int
    mtime_ns: int
    duration: float | None
    language: str | None
    segments: int
    probe: dict[str, Any]
    indexed_at: float
    analysis: int = ANALYSIS_VERSION  # segments.ANALYSIS_VERSION of the stages that indexed it
    # What the file was given when indexed (a manifest's columns, a downloaded file's web address), also in the
    # `extra` of each of its segments.
    metadata: dict[str, Any] = field(default_factory=dict)

    def by_earlier_analysis(self) -> bool:
        """Indexed by stages that find less in it than these do: of an earlier version, or a file of several audio
        tracks indexed when only its first was transcribed (its probe lists no tracks)."""
        return self.analysis < ANALYSIS_VERSION or (
            self.probe.get("audio_streams", 0) > 1 and "audio_tracks" not in self.probe)


def catalog_corrupt_message(path: Path, why: object) -> str:
    return (f"the catalog {path} cannot be read ({why}); nothing was changed. Restore the index folder "
            f"{path.parent} from a backup, or run `mediaindex index reset --index {path.parent}` and ingest again")


class Catalog:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(str(path), timeout=30)
        self._db.row_factory = sqlite3.Row
        try:
            # A damaged page is found now, with a message, rather than by the query that meets it.
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            self._db.executescript(_SCHEMA)
            self._add_columns()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if is_disk_full(exc):
                raise IndexDiskFullError(disk_full_message(path.parent)) from exc
            raise IndexCorruptError(catalog_corrupt_message(path, exc)) from exc

    def _add_columns(self) -> None:
        """A catalog written before files carried their analysis version (its files are of version 1) or their
        metadata (kept in their segments alone)."""
        for column, definition in (("analysis", "INTEGER NOT NULL DEFAULT 1"), ("metadata", "TEXT NOT NULL DEFAULT '{}'")):
            if column in {r[1] for r in self._db.execute("PRAGMA table_info(videos)")}:
                continue
            try:
                with self._db:
                    self._db.execute(f"ALTER TABLE videos ADD COLUMN {column} {definition}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it first
                    raise

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction; SQLite's errors leave as typed ones (a full disk, a damaged file)."""
        try:
            with self._db:
                yield
        except sqlite3.DatabaseError as exc:
            if is_disk_full(exc):
                raise IndexDiskFullError(disk_full_message(self.path.parent)) from exc
            raise IndexCorruptError(catalog_corrupt_message(self.path, exc)) from exc

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM videos").fetchone()[0])

    def by_source(self, source: str) -> VideoRecord | None:
        if not is_utf8(source):  # never indexed; SQLite refuses such text rather than find nothing
            return None
        row = self._db.execute("SELECT * FROM videos WHERE source = ?", (source,)).fetchone()
        return self._record(row)

    def get(self, video_id: str) -> VideoRecord | None:
        if not is_utf8(video_id):
            return None
        row = self._db.execute("SELECT * FROM videos WHERE video_id = ?", (video_id,)).fetchone()
        return self._record(row)

    def of_size(self, size: int) -> list[VideoRecord]:
        return [self._record(r) for r in self._db.execute(  # type: ignore[misc]
            "SELECT * FROM videos WHERE size = ? ORDER BY source", (size,))]

    def move(self, video_id: str, source: str, mtime_ns: int) -> None:
        """The file's new path (the same bytes, moved or renamed)."""
        with self._writing():
            self._db.execute("UPDATE videos SET source = ?, mtime_ns = ? WHERE video_id = ?",
                             (source, mtime_ns, video_id))

    def all(self) -> list[VideoRecord]:
        return [self._record(r) for r in self._db.execute("SELECT * FROM videos ORDER BY source")]  # type: ignore[misc]

    def metadata_texts(self, key: str) -> list[str]:
        """The distinct texts the files' metadata hold under a key (a list's text items included)."""
        path = '$."' + key + '"'  # keys hold no quotes or backslashes (`filters.check_metadata`)
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT each.value FROM videos, json_each(videos.metadata, ?) AS each WHERE each.type = 'text'",
            (path,))]

    def upsert(self, record: VideoRecord) -> None:
        with self._writing():
            self._db.execute("DELETE FROM videos WHERE source = ? OR video_id = ?", (record.source, record.video_id))
            self._db.execute(
                "INSERT INTO videos (video_id, source, content_hash, size, mtime_ns, duration, language, segments, "
                "probe, indexed_at, analysis, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (record.video_id, record.source, record.content_hash, record.size, record.mtime_ns,
                 record.duration, record.language, record.segments, json.dumps(record.probe), record.indexed_at,
                 record.analysis, json.dumps(record.metadata, ensure_ascii=False)),
            )

    def earlier_analysis(self, version: int) -> int:
        """How many files were indexed by stages of a version before `version`, or before a file's several audio
        tracks were each transcribed (`VideoRecord.by_earlier_analysis`)."""
        return int(self._db.execute(
            "SELECT COUNT(*) FROM videos WHERE analysis < ? OR (json_extract(probe, '$.audio_streams') > 1 "
            "AND json_extract(probe, '$.audio_tracks') IS NULL)", (version,)).fetchone()[0])

    def touch(self, source: str, size: int, mtime_ns: int) -> None:
        with self._writing():
            self._db.execute("UPDATE videos SET size = ?, mtime_ns = ? WHERE source = ?", (size, mtime_ns, source))

    def delete(self, video_id: str) -> None:
        with self._writing():
            self._db.execute("DELETE FROM videos WHERE video_id = ?", (video_id,))
            self._forget_words(video_id)

    def set_words(self, video_id: str, words: Iterable[str]) -> None:
        """Record a file's words (replacing what was recorded for it)."""
        with self._writing():
            self._forget_words(video_id)
            self._db.executemany("INSERT INTO words VALUES (?, ?)", ((video_id, w) for w in sorted(set(words))))
            self._db.execute("INSERT INTO worded VALUES (?)", (video_id,))

    def _forget_words(self, video_id: str) -> None:
        self._db.execute("DELETE FROM words WHERE video_id = ?", (video_id,))
        self._db.execute("DELETE FROM worded WHERE video_id = ?", (video_id,))

    def vocabulary(self) -> frozenset[str]:
        """Every word any indexed file holds."""
        return frozenset(r[0] for r in self._db.execute(
            "SELECT DISTINCT word FROM words WHERE video_id IN (SELECT video_id FROM videos)"))

    def without_words(self) -> list[str]:
        """Indexed files whose words are not recorded yet."""
        return [r[0] for r in self._db.execute(
            "SELECT video_id FROM videos WHERE video_id NOT IN (SELECT video_id FROM worded)")]

    def version(self) -> int:
        """Changes when another connection commits to the catalog (SQLite's data_version)."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _record(row: sqlite3.Row | None) -> VideoRecord | None:
        if row is None:
            return None
        data = dict(row)
        data["probe"] = json.loads(data["probe"] or "{}")
        data["metadata"] = json.loads(data["metadata"] or "{}")
        return VideoRecord(**data)


def now() -> float:
    return time.time()
