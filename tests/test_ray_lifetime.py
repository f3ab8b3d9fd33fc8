"""Ray's processes end with the run that started them: a Ray-mode `ingest` killed with SIGKILL leaves none behind
(not until the next run: within seconds), and `serve` stopped with SIGTERM mid-job stops Ray quietly, in seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from mediaindex.workers.orphans import started_by
from tests.conftest import REPO, cli_environment, media

pytestmark = [pytest.mark.slow, pytest.mark.beside,
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc (Linux)")]

CLIPS = ["audio/jfk.flac", "audio/english.wav", "audio/multilingual.mp3", "audio/french.aiff"]
GRACE_S = 15.0  # a killed process with models in memory takes a moment to be torn down on a busy machine


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _until(check: Callable[[], object], what: str, limit: float = 300.0) -> object:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _stage_working(pid: int) -> bool:
    return any(_command(p).startswith(b"ray::StageActor.process") for p in started_by(pid))


def _watchdogs_of(pid: int) -> list[int]:
    mark = f" {pid}:".encode()
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and b"mediaindex.workers.watchdog" in (cmd := _command(int(p.name)).replace(b"\0", b" "))
            and mark in cmd]


def _environment(tmp_path: Path, cache_dir: Path, temp: Path) -> tuple[dict[str, str], Path]:
    folder = tmp_path / "media"
    folder.mkdir()
    for rel in CLIPS:
        shutil.copy(media(rel), folder)
    env = cli_environment(tmp_path / "index", cache_dir, temp)
    # These runs are about Ray's processes: no small-job path in this process.
    env.update(MEDIAINDEX_VISION__ENABLED="false", MEDIAINDEX_INGEST__IN_PROCESS_MAX_FILES="0")
    env.pop("MEDIAINDEX_RAY_OWNER", None)
    return env, folder


def _all_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_a_killed_ingest_leaves_no_ray_process(tmp_path: Path, cache_dir: Path,
                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    env, folder = _environment(tmp_path, cache_dir, tmp_path_factory.mktemp("t"))
    run = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", str(folder)], cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: _stage_working(run.pid), "a stage actor working on a file")
        ray = started_by(run.pid)
        assert any(b"raylet" in _command(p) for p in ray) and _watchdogs_of(run.pid)
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait(30)
    assert _all_gone(ray) == [], [_command(p)[:40] for p in ray if _alive(p)]
    assert _all_gone(_watchdogs_of(run.pid)) == []  # its work done, the watchdog is gone too


def test_serve_stopped_mid_job_stops_ray_quietly_in_seconds(tmp_path: Path, cache_dir: Path,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.test_api_support import free_port

    env, folder = _environment(tmp_path, cache_dir, tmp_path_factory.mktemp("t"))
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        serve = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port), "--media-root",
                                  str(folder)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/health/ready", timeout=5).status_code == 200
        except httpx.TransportError:
            return serve.poll() is not None  # ended: the assertion below says so

    try:
        _until(ready, "the server")
        assert serve.poll() is None, log.read_text()
        job = httpx.post(f"{url}/ingest", json={"paths": ["."]}, timeout=30).json()["id"]
        _until(lambda: _stage_working(serve.pid), "a stage actor working on a file")
        ray = started_by(serve.pid)
        began = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        took = time.monotonic() - began
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    text = log.read_text(errors="replace")
    assert took < 15, (took, text)  # the job in progress is left for the next start, not waited for
    assert "SIGTERM received" not in text and "PC: @" not in text and "Traceback" not in text, text
    assert "SIGTERM handler is not set" not in text, text  # Ray's notice, when a job thread starts it
    assert _all_gone(ray) == [], [_command(p)[:40] for p in ray if _alive(p)]
    # The job is left as after a kill: the next start goes on with it.
    from mediaindex.jobs import JobStore

    jobs = JobStore(tmp_path / "index" / "jobs.db")
    try:
        assert jobs.get(job).state in ("running", "done"), jobs.get(job)
    finally:
        jobs.close()
