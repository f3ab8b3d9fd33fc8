"""`mediaindex jobs cancel ID` against a running CLI ingest (another process): it stops at the next file
boundary, the files it finished stay indexed and done, the others go back to pending, and a resume
finishes them without indexing anything twice."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, media

pytestmark = [pytest.mark.slow, pytest.mark.beside]
FILES = ["audio/jfk.flac", "audio/english.wav", "audio/LJ002-0020.wav", "audio/LJ002-0035.wav",
         "audio/2412-153948-0000.flac"]


def _states(db: Path, job: str) -> dict[str, str]:
    with sqlite3.connect(db) as c:
        return {Path(p).name: s for p, s in c.execute("SELECT path, state FROM job_files WHERE job_id = ?", (job,))}


def test_cancel_stops_a_running_ingest_at_a_file_boundary(tmp_path: Path, tmp_path_factory, cache_dir: Path) -> None:
    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(tmp_path / "index"), "MEDIAINDEX_CACHE_DIR": str(cache_dir),
           "MEDIAINDEX_TEMP_DIR": str(tmp_path_factory.mktemp("c"))}
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):
        env.pop(var, None)
    # One file at a time, so that a cancel finds files that have not started.
    env["MEDIAINDEX_RAY__MAX_FILES_IN_FLIGHT"] = "1"
    log = tmp_path / "ingest.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", *(str(media(f)) for f in FILES)],
                                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    db = tmp_path / "index" / "jobs.db"
    try:
        deadline = time.monotonic() + 400
        job = None
        while time.monotonic() < deadline and proc.poll() is None:
            job = job or next((line.split()[1] for line in log.read_text().splitlines() if line.startswith("job ")),
                              None)
            if job and "done" in _states(db, job).values():
                break
            time.sleep(0.3)
        assert job and proc.poll() is None, log.read_text()
        cancel = subprocess.run([sys.executable, "-m", "mediaindex", "jobs", "cancel", job], capture_output=True,
                                text=True, env=env, cwd=REPO, timeout=120)
        assert cancel.returncode == 0 and "will stop after the file" in cancel.stdout, cancel.stderr
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    states = _states(db, job)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT state FROM jobs WHERE id = ?", (job,)).fetchone()[0] == "cancelled"
    done = [n for n, s in states.items() if s == "done"]
    assert done and len(done) < len(FILES), states
    assert set(states.values()) <= {"done", "pending"}, states  # nothing failed, nothing charged
    again = subprocess.run([sys.executable, "-m", "mediaindex", "jobs", "cancel", job], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=120)
    assert again.returncode == 2 and "already ended" in again.stderr

    resumed = subprocess.run([sys.executable, "-m", "mediaindex", "ingest", "--resume", job], capture_output=True,
                             text=True, env=env, cwd=REPO, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert set(_states(db, job).values()) == {"done"}
    stats = subprocess.run([sys.executable, "-m", "mediaindex", "index", "stats", "--json"], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=300)
    assert json.loads(stats.stdout)["files"] == len(FILES)  # each once: the resume indexed nothing twice
