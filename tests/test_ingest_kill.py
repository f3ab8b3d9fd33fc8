"""Whole-run SIGKILLs of `mediaindex ingest`: honest attempts on resume, and no Ray processes left behind.

Each run is a real CLI process killed with SIGKILL at a chosen moment: right after its job exists, while its
stage actors load their models, and while a stage works on a file. A kill says nothing about the files in
flight, so it charges none (only a crash does) and no kill gives a file up; and the Ray processes of a killed
run are gone before the next run starts its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mediaindex.jobs import JobStore
from mediaindex.workers.orphans import started_by
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.beside]

CLIPS = ["audio/jfk.flac", "audio/english.wav", "audio/LJ002-0020.wav", "audio/LJ002-0035.wav"]


class Run:
    """One `mediaindex ingest` process, its stderr collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", *args], cwd=REPO, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def job_id(self) -> str | None:
        return next((ln.split()[1] for ln in self.lines if ln.startswith("job ") and len(ln.split()) == 2), None)

    def ray_processes(self) -> list[int]:
        """The processes of the Ray this run started."""
        return started_by(self.proc.pid)

    def stage_actors(self) -> list[int]:
        return [pid for pid in self.ray_processes() if _command(pid).startswith(b"ray::StageActor")]

    def kill(self) -> list[int]:
        """SIGKILL the driver alone (as the OOM killer would); returns its Ray processes still running."""
        left = self.ray_processes()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        return [pid for pid in left if _alive(pid)]


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _until(check: Callable[[], object], what: str, limit: float = 180.0, every: float = 0.02) -> object:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def _files(db: Path, job_id: str) -> dict[str, tuple[str, int]]:
    jobs = JobStore(db)
    try:
        return {Path(f.path).name: (f.state, f.attempts) for f in jobs.files(job_id)}
    finally:
        jobs.close()


def _working(db: Path, job_id: str) -> int:
    """Stage calls in progress on the job's files."""
    jobs = JobStore(db)
    try:
        return int(jobs._db.execute("SELECT SUM(working) FROM job_files WHERE job_id = ?", (job_id,)).fetchone()[0])
    finally:
        jobs.close()


def _starts_after(previous: list[int], run: Run) -> None:
    """The new run's first Ray process appears only once every Ray process of the killed run is gone."""
    _until(run.ray_processes, "the next run's Ray processes")
    assert [pid for pid in previous if _alive(pid)] == []


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc (Linux)")
def test_three_early_kills_give_up_nothing_and_leave_no_ray_processes(tmp_path: Path, cache_dir: Path,
                                                                       tmp_path_factory: pytest.TempPathFactory,
                                                                       copy_media) -> None:
    for rel in CLIPS:
        copy_media(rel)
    folder = tmp_path / "media"
    env = dict(os.environ)
    env.update(MEDIAINDEX_INDEX_DIR=str(tmp_path / "index"), MEDIAINDEX_CACHE_DIR=str(cache_dir),
               MEDIAINDEX_TEMP_DIR=str(tmp_path_factory.mktemp("t")), MEDIAINDEX_VISION__ENABLED="false",
               MEDIAINDEX_INGEST__IN_PROCESS_MAX_FILES="0")  # these runs are about Ray's processes: no small-job path
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "MEDIAINDEX_RAY_OWNER"):
        env.pop(name, None)  # each CLI run starts its own Ray
    db = tmp_path / "index" / "jobs.db"

    # 1. Killed as soon as its job exists: nothing was started, nothing is charged.
    first = Run([str(folder)], env)
    job_id = str(_until(first.job_id, "the job line"))
    first.kill()
    assert set(_files(db, job_id).values()) == {("pending", 0)}

    # 2. Killed while its stage actors load their models: still no stage worked on any file.
    second = Run(["--resume", job_id], env)
    _until(second.stage_actors, "the second run's stage actors")
    left = second.kill()
    assert set(_files(db, job_id).values()) == {("pending", 0)}

    # 3. Killed while a stage works on a file (none finished): a kill charges nothing, even the file in a stage.
    third = Run(["--resume", job_id], env)
    _starts_after(left, third)
    _until(lambda: _working(db, job_id), "a stage working on a file", every=0.01)
    left = third.kill()
    states = _files(db, job_id)
    assert not any(state == "done" for state, _ in states.values()), states
    assert all(attempts == 0 for _, attempts in states.values()), states

    # 4. The resume finishes every file; none was given up.
    fourth = Run(["--resume", job_id], env)
    _starts_after(left, fourth)
    assert fourth.proc.wait(300) == 0, "\n".join(fourth.lines)
    assert not any("gave up" in line for line in fourth.lines)
    assert any(line.startswith(f"done: {len(CLIPS)} files indexed") for line in fourth.lines), fourth.lines
    final = _files(db, job_id)
    assert final == {n: ("done", 1) for n in final}  # the one attempt that finished each file
    _until(lambda: not fourth.ray_processes(), "the finished run's Ray processes to end", limit=60)
