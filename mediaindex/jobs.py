"""Persisted jobs (SQLite in the index directory): ingest runs, summaries and questions.

A job has an id, a kind, parameters, a state and a result; an ingest job also has a manifest of
files, each with its own state, so that a run stopped by a crash or Ctrl-C resumes where it stopped.
The CLI and the HTTP API share these records.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mediaindex.errors import MediaIndexError

if TYPE_CHECKING:
    from mediaindex.config import Settings

JobState = Literal["pending", "running", "done", "failed", "cancelled"]
FileState = Literal["pending", "running", "done", "failed", "skipped"]
JOB_STATES = ("pending", "running", "done", "failed", "cancelled")
FILE_STATES = ("pending", "running", "done", "failed", "skipped")
ACTIVE_STATES = ("pending", "running")
JOBS_DB = "jobs.db"

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
"""
# Columns added after the first release; a store made before them gains them when it is opened.
_ADDED_COLUMNS = {
    # When cancelling was asked for (NULL: never). A pending job is cancelled at once; a running ingest stops
    # at its next file boundary, keeping the files it finished; a summary or question before its next model call.
    "cancel_requested": "REAL",
    # A digest of (kind, params) that identical requests share, so a second one joins the pending first.
    "request_key": "TEXT",
    # The process running the job ("pid:start time"): a running job whose process is gone was interrupted.
    "runner": "TEXT",
    # How far a running ingest is (JSON: the files in its stages, each stage's share done, the ETA), written
    # every few seconds by the run; cleared when the job leaves "running".
    "progress": "TEXT",
}
_ADDED_FILE_COLUMNS = {
    # Stage calls on the file in progress (not attempts): what a run that died was doing with the file.
    "working": "INTEGER NOT NULL DEFAULT 0",
}


def _progress_record(text: str | None) -> dict[str, Any] | None:
    """A running job's progress as written by its run; None when there is none or it cannot be read (a report
    that was cut or garbled says nothing the next one will not: it is not worth an error)."""
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    now = record.get("now") if isinstance(record, dict) else None
    if not isinstance(now, dict) or not all(isinstance(stages, dict) for stages in now.values()):
        return None
    return record


class JobStoreError(MediaIndexError):
    """The job records cannot be read or written (a damaged file, a full disk)."""


def _process_start(pid: int) -> str | None:
    """When a process started (clock ticks since boot, from /proc), so a reused pid is not taken for it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def this_runner() -> str:
    return f"{os.getpid()}:{_process_start(os.getpid()) or ''}"


def runner_alive(runner: str | None) -> bool:
    """Whether the process recorded as running a job still runs (unknown: assumed so)."""
    if not runner:
        return True
    pid_text, _, started = runner.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    if pid == os.getpid():
        return True
    if started and os.path.isdir("/proc/self"):
        return _process_start(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def crash_record(jobs_db: Path, runner: str) -> Path:
    """Where a run's fatal-signal traceback goes (Python's faulthandler): it says the run crashed, not killed."""
    return jobs_db.parent / f".crash-{runner.replace(':', '-')}.log"


def jobs_db_path(settings: Settings) -> Path:
    """Where an index's job records live: beside it, in its directory."""
    return Path(settings.index_dir) / JOBS_DB


def request_key(kind: str, params: dict[str, Any]) -> str:
    """The same digest for requests that ask for the same work (key order does not matter)."""
    canonical = json.dumps([kind, params], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class JobFinished(ValueError):
    """Cancelling a job that has already ended."""

    def __init__(self, job_id: str, state: str) -> None:
        super().__init__(f"job {job_id} has already ended ({state}); there is nothing to cancel")
        self.job_id, self.state = job_id, state


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
    cancel_requested: float | None = None
    runner: str | None = None
    # A running ingest's last report: {"now": {path: {stage: share or None}}, "eta": seconds or None, ...}.
    progress: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def interrupted(self) -> bool:
        """Recorded as running, but the process running it is gone (killed): it can be resumed."""
        return self.state == "running" and not runner_alive(self.runner)

    @property
    def shown_state(self) -> str:
        return "interrupted" if self.interrupted else self.state


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
        self.path = path
        # One connection per store; SQLite's own locking makes CLI and API processes safe together.
        self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        try:
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            with self._db:
                for table, added in (("jobs", _ADDED_COLUMNS), ("job_files", _ADDED_FILE_COLUMNS)):
                    have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
                    for column, kind in added.items():
                        if column not in have:
                            self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise JobStoreError(self._unreadable(exc)) from exc

    def _unreadable(self, exc: sqlite3.DatabaseError) -> str:
        if any(text in str(exc) for text in ("disk is full", "No space left")):
            return (f"the disk holding the job records {self.path} is full ({exc}); free some space and run the "
                    "command again")
        return (f"the job records {self.path} cannot be read ({exc}); the index itself is not affected. Restore "
                "the file from a backup, or move it aside (the job history is lost) and run the command again")

    @classmethod
    def of(cls, settings: Settings) -> JobStore:
        """The job records of the index `settings` name."""
        return cls(jobs_db_path(settings))

    def create(self, kind: str, params: dict[str, Any], files: list[tuple[str, dict[str, Any]]] | None = None,
               key: str | None = None) -> Job:
        """A new pending job; `key` (see request_key) lets find_pending find it for an identical request."""
        job_id = uuid.uuid4().hex[:12]
        now = time.time()
        with self._db:
            self._db.execute(
                "INSERT INTO jobs (id, kind, state, params, result, error, created, updated, request_key) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (job_id, kind, "pending", json.dumps(params), None, None, now, now, key),
            )
            self._insert_files(job_id, 0, files or [], "pending", "")
        return self.get(job_id)

    def add_files(self, job_id: str, files: list[tuple[str, dict[str, Any]]], state: FileState = "pending",
                  reason: str = "") -> None:
        """Files found for a job once it runs (what its web addresses gave), after those it has; a file it has
        already stays as it is."""
        with self._db:
            last = self._db.execute("SELECT MAX(seq) FROM job_files WHERE job_id = ?", (job_id,)).fetchone()[0]
            self._insert_files(job_id, 0 if last is None else last + 1, files, state, reason)
            self._db.execute("UPDATE jobs SET updated = ? WHERE id = ?", (time.time(), job_id))

    def _insert_files(self, job_id: str, first: int, files: list[tuple[str, dict[str, Any]]], state: FileState,
                      reason: str) -> None:
        if state not in FILE_STATES:
            raise ValueError(f"unknown file state {state!r}")
        self._db.executemany(
            "INSERT OR IGNORE INTO job_files (job_id, seq, path, state, reason, meta) VALUES (?,?,?,?,?,?)",
            [(job_id, first + i, path, state, reason, json.dumps(meta)) for i, (path, meta) in enumerate(files)],
        )

    def get(self, job_id: str) -> Job:
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        data = dict(row)
        data["params"] = json.loads(data["params"])
        data["result"] = json.loads(data["result"]) if data["result"] is not None else None
        data["progress"] = _progress_record(data["progress"]) if data["state"] == "running" else None
        data.pop("request_key", None)
        return Job(**data)

    def interrupted_work(self, job_id: str) -> bool:
        """Settle what a run of this job whose process is gone left behind, before the job runs again; True
        when there was one. Its files caught in flight go back to pending, charged one attempt only when that
        run crashed while a stage worked on them (a fatal signal, recorded by faulthandler): a kill (SIGKILL,
        power loss) says nothing about the files, so it charges none."""
        row = self._db.execute("SELECT runner FROM jobs WHERE id = ?", (job_id,)).fetchone()
        runner = row["runner"] if row else None
        if not runner or runner == this_runner() or runner_alive(runner):
            return False
        record = crash_record(self.path, runner)
        crashed = record.exists() and record.stat().st_size > 0
        with self._db:
            self._db.execute(
                "UPDATE job_files SET attempts = attempts + CASE WHEN working > 0 AND ? THEN 1 ELSE 0 END, "
                "state = CASE WHEN state = 'running' THEN 'pending' ELSE state END, "
                "reason = CASE WHEN state = 'running' THEN ? ELSE reason END, working = 0 WHERE job_id = ?",
                (int(crashed), "the run stopped (crashed)" if crashed else "interrupted", job_id))
            self._db.execute("UPDATE jobs SET runner = NULL WHERE id = ?", (job_id,))
        record.unlink(missing_ok=True)
        return True

    def find_pending(self, key: str) -> Job | None:
        """The oldest pending job made with this request key, if any (identical requests join it)."""
        row = self._db.execute(
            "SELECT id FROM jobs WHERE request_key = ? AND state = 'pending' AND cancel_requested IS NULL "
            "ORDER BY created LIMIT 1", (key,)).fetchone()
        return self.get(row["id"]) if row else None

    def count_pending(self, where: dict[str, Any] | None = None) -> int:
        """Jobs waiting to start; `where` narrows to those whose params hold these values (e.g. origin)."""
        rows = self._db.execute("SELECT params FROM jobs WHERE state = 'pending'").fetchall()
        if not where:
            return len(rows)
        return sum(1 for r in rows if all(json.loads(r["params"]).get(k) == v for k, v in where.items()))

    def request_cancel(self, job_id: str) -> Job:
        """Cancel a job: a pending one ends now, a running one is asked to stop (an ingest at its next file
        boundary, a summary or question before its next language-model call).

        Asking again is harmless; a job that has already ended raises JobFinished."""
        now = time.time()
        with self._db:
            job = self.get(job_id)
            if not job.active:
                raise JobFinished(job_id, job.state)
            self._db.execute("UPDATE jobs SET cancel_requested = COALESCE(cancel_requested, ?), updated = ? "
                             "WHERE id = ?", (now, now, job_id))
            self._db.execute("UPDATE jobs SET state = 'cancelled', error = 'cancelled before it started' "
                             "WHERE id = ? AND state = 'pending'", (job_id,))
        return self.get(job_id)

    def is_cancel_requested(self, job_id: str) -> bool:
        """Whether someone asked this job to stop (checked by a running job between files)."""
        row = self._db.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row["cancel_requested"] is not None

    def claim(self, job_id: str) -> bool:
        """Mark a pending (or interrupted running) job running; False when it was cancelled or has ended."""
        self.interrupted_work(job_id)
        with self._db:
            cur = self._db.execute(
                "UPDATE jobs SET state = 'running', updated = ?, runner = ? "
                "WHERE id = ? AND state IN ('pending', 'running') AND cancel_requested IS NULL",
                (time.time(), this_runner(), job_id))
        return cur.rowcount == 1

    def delete(self, job_id: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def list(self, kind: str | None = None, limit: int = 100, states: tuple[str, ...] | None = None) -> list[Job]:
        """The newest jobs first; of one kind, and in some states, where given."""
        where: builtins.list[str] = []
        args: tuple[Any, ...] = ()
        if kind:
            where, args = ["kind = ?"], (kind,)
        if states is not None:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += states
        query = "SELECT id FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY created DESC LIMIT ?"
        return [self.get(r["id"]) for r in self._db.execute(query, (*args, limit)).fetchall()]

    def set_state(self, job_id: str, state: JobState, result: Any = None, error: str | None = None) -> None:
        if state not in JOB_STATES:
            raise ValueError(f"unknown job state {state!r}")
        if state == "running":
            self.interrupted_work(job_id)
        with self._db:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, result = COALESCE(?, result), error = ?, updated = ?, progress = NULL, "
                "runner = CASE WHEN ? = 'running' THEN ? ELSE runner END WHERE id = ?",
                (state, json.dumps(result) if result is not None else None, error, time.time(), state, this_runner(),
                 job_id),
            )
        if cur.rowcount == 0:
            raise JobNotFound(job_id)

    def set_progress(self, job_id: str, progress: dict[str, Any]) -> None:
        """A running job's report of how far it is (see `Job.progress`); nothing else of the job changes."""
        with self._db:
            self._db.execute("UPDATE jobs SET progress = ? WHERE id = ? AND state = 'running'",
                             (json.dumps(progress), job_id))

    def files(self, job_id: str, states: tuple[str, ...] | None = None) -> builtins.list[JobFile]:
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
        """`attempt` is added to the file's attempts (1: a run finished its work on it)."""
        if state not in FILE_STATES:
            raise ValueError(f"unknown file state {state!r}")
        with self._db:
            cur = self._db.execute(
                "UPDATE job_files SET state = ?, reason = ?, video_id = COALESCE(?, video_id), "
                "attempts = attempts + ?, working = CASE WHEN ? = 'running' THEN working ELSE 0 END "
                "WHERE job_id = ? AND path = ?",
                (state, reason, video_id, int(attempt), state, job_id, path),
            )
            self._db.execute("UPDATE jobs SET updated = ? WHERE id = ?", (time.time(), job_id))
        if cur.rowcount == 0:
            raise KeyError(f"job {job_id} has no file {path!r}")

    def set_working(self, job_id: str, path: str, change: int) -> None:
        """A stage call on the file started (+1) or ended (-1); the file is "running" while it is in the stages."""
        with self._db:
            self._db.execute("UPDATE job_files SET state = 'running', working = MAX(0, working + ?) "
                             "WHERE job_id = ? AND path = ?", (int(change), job_id, path))

    def clear_cancel(self, job_id: str) -> None:
        """Forget a cancel request: a resume asks the job to run again."""
        with self._db:
            self._db.execute("UPDATE jobs SET cancel_requested = NULL WHERE id = ?", (job_id,))

    def counts(self, job_id: str) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT state, COUNT(*) AS n FROM job_files WHERE job_id = ? GROUP BY state", (job_id,)
        ).fetchall()
        return {r["state"]: r["n"] for r in rows}

    def close(self) -> None:
        self._db.close()
