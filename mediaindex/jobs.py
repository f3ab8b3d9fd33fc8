"""Persisted jobs (SQLite in the index directory): ingest runs, summaries and questions.

A job has an id, a kind, parameters, a state and a result; an ingest job also has a manifest of
files, each with its own state, so that a run stopped by a crash or Ctrl-C resumes where it stopped.
The CLI and the HTTP API share these records.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

JobState = Literal["pending", "running", "done", "failed", "cancelled"]
FileState = Literal["pending", "running", "done", "failed", "skipped"]
JOB_STATES = ("pending", "running", "done", "failed", "cancelled")
FILE_STATES = ("pending", "running", "done", "failed", "skipped")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    params TEXT NOT NULL,
    result TEXT,
    error TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS job_files (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    path TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    video_id TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_id, path)
);
CREATE TABLE IF NOT EXISTS job_cancels (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    requested REAL NOT NULL
);
"""


class JobNotFound(KeyError):
    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r}"


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    state: str
    params: dict[str, Any]
    result: Any
    error: str | None
    created: float
    updated: float


@dataclass(frozen=True)
class JobFile:
    path: str
    state: str
    reason: str
    attempts: int
    video_id: str | None
    meta: dict[str, Any]


class JobStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection per store; SQLite's own locking makes CLI and API processes safe together.
        self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def create(self, kind: str, params: dict[str, Any], files: list[tuple[str, dict[str, Any]]] | None = None) -> Job:
        job_id = uuid.uuid4().hex[:12]
        now = time.time()
        with self._db:
            self._db.execute(
                "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?)",
                (job_id, kind, "pending", json.dumps(params), None, None, now, now),
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO job_files (job_id, seq, path, state, meta) VALUES (?,?,?,?,?)",
                [(job_id, i, path, "pending", json.dumps(meta)) for i, (path, meta) in enumerate(files or [])],
            )
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        data = dict(row)
        data["params"] = json.loads(data["params"])
        data["result"] = json.loads(data["result"]) if data["result"] is not None else None
        return Job(**data)

    def list(self, kind: str | None = None, limit: int = 100) -> list[Job]:
        query = "SELECT id FROM jobs" + (" WHERE kind = ?" if kind else "") + " ORDER BY created DESC LIMIT ?"
        args: tuple[Any, ...] = (kind, limit) if kind else (limit,)
        return [self.get(r["id"]) for r in self._db.execute(query, args).fetchall()]

    def set_state(self, job_id: str, state: JobState, result: Any = None, error: str | None = None) -> None:
        if state not in JOB_STATES:
            raise ValueError(f"unknown job state {state!r}")
        with self._db:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, result = COALESCE(?, result), error = ?, updated = ? WHERE id = ?",
                (state, json.dumps(result) if result is not None else None, error, time.time(), job_id),
            )
        if cur.rowcount == 0:
            raise JobNotFound(job_id)

    def files(self, job_id: str, states: tuple[str, ...] | None = None) -> list[JobFile]:
        self.get(job_id)
        rows = self._db.execute(
            "SELECT path, state, reason, attempts, video_id, meta FROM job_files WHERE job_id = ? ORDER BY seq",
            (job_id,),
        ).fetchall()
        out = [JobFile(r["path"], r["state"], r["reason"], r["attempts"], r["video_id"], json.loads(r["meta"]))
               for r in rows]
        return [f for f in out if states is None or f.state in states]

    def set_file(self, job_id: str, path: str, state: FileState, reason: str = "", video_id: str | None = None,
                 attempt: int = 0) -> None:
        """`attempt` is added to the file's attempts (1: a run started work on it; -1: gives that back)."""
        if state not in FILE_STATES:
            raise ValueError(f"unknown file state {state!r}")
        with self._db:
            cur = self._db.execute(
                "UPDATE job_files SET state = ?, reason = ?, video_id = COALESCE(?, video_id), "
                "attempts = attempts + ? WHERE job_id = ? AND path = ?",
                (state, reason, video_id, int(attempt), job_id, path),
            )
            self._db.execute("UPDATE jobs SET updated = ? WHERE id = ?", (time.time(), job_id))
        if cur.rowcount == 0:
            raise KeyError(f"job {job_id} has no file {path!r}")

    def request_cancel(self, job_id: str) -> None:
        """Ask a running job to stop at its next file boundary (its finished files are kept)."""
        self.get(job_id)
        with self._db:
            self._db.execute("INSERT OR IGNORE INTO job_cancels VALUES (?, ?)", (job_id, time.time()))

    def clear_cancel(self, job_id: str) -> None:
        """The request was honoured (or a resume asks the job to run again)."""
        with self._db:
            self._db.execute("DELETE FROM job_cancels WHERE job_id = ?", (job_id,))

    def is_cancel_requested(self, job_id: str) -> bool:
        return self._db.execute("SELECT 1 FROM job_cancels WHERE job_id = ?", (job_id,)).fetchone() is not None

    def counts(self, job_id: str) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT state, COUNT(*) AS n FROM job_files WHERE job_id = ? GROUP BY state", (job_id,)
        ).fetchall()
        return {r["state"]: r["n"] for r in rows}

    def close(self) -> None:
        self._db.close()
