"""`mediaindex ingest` job flags and `mediaindex jobs`, run as a user runs them (one process per command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mediaindex.jobs import JobStore
from tests.conftest import REPO, cli_environment, media

pytestmark = pytest.mark.beside  # waits on the `mediaindex` processes it runs


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


@pytest.fixture
def env(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, str]:
    return cli_environment(tmp_path / "index", cache_dir, tmp_path_factory.mktemp("t"))


def _stderr(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest"], "nothing to ingest"),
        (["ingest", "--resume", "abc", "x.mp4"], "--resume continues a job with its own inputs"),
        (["ingest", "--resume", "nope"], "no job with id 'nope'"),
        (["ingest", str(REPO), "--include", ""], "glob is empty"),
        (["ingest", "--manifest", "no-such-manifest.txt"], "manifest not found"),
        (["ingest", "--manifest", str(REPO)], "is a folder, not a file"),
        (["ingest", "x.mp4", "--config", "nosuch"], "unknown config profile"),
        (["jobs", "nope"], "no job with id 'nope'"),
        (["ingest", "x.mp4", "--address", "nonsense"], "ray.address: Value error, must be 'auto', 'host:port'"),
        (["ingest", str(media("audio/english.wav")), "--address", "127.0.0.1:1"],
         "cannot reach the Ray cluster at '127.0.0.1:1'"),
    ],
)
def test_bad_job_flags_are_refused_clearly(env: dict[str, str], args: list[str], message: str) -> None:
    result = run(*args, env=env)
    assert result.returncode == 2, result.stderr
    assert message in _stderr(result)
    assert "Traceback" not in result.stderr


def test_bad_manifest_names_its_line_and_starts_no_job(env: dict[str, str], tmp_path: Path) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"path,title\n{media('audio/jfk.flac')},JFK\n,missing path\n")
    result = run("ingest", "--manifest", str(manifest), env=env)
    assert result.returncode == 2
    assert f"manifest {manifest} line 3: empty 'path'" in _stderr(result)
    listed = run("jobs", "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_jobs_lists_jobs_and_one_jobs_files(env: dict[str, str]) -> None:
    store = JobStore(Path(env["MEDIAINDEX_INDEX_DIR"]) / "jobs.db")
    job = store.create("ingest", {"paths": ["/m"]}, files=[("/m/a.mp4", {}), ("/m/b.mp4", {"title": "B"})])
    store.set_file(job.id, "/m/a.mp4", "failed", "worker died (2 retries): killed", attempt=True)
    store.set_state(job.id, "cancelled", error="interrupted")
    store.close()

    listed = json.loads(run("jobs", "--json", env=env).stdout)
    assert [(j["id"], j["state"], j["counts"]) for j in listed] == [(job.id, "cancelled", {"failed": 1, "pending": 1})]
    table = run("jobs", env=env)
    assert table.returncode == 0 and job.id in table.stdout and "1 failed, 1 pending" in table.stdout
    detail = json.loads(run("jobs", job.id, "--json", env=env).stdout)
    assert [(f["path"], f["state"], f["attempts"]) for f in detail["files"]] == [
        ("/m/a.mp4", "failed", 1), ("/m/b.mp4", "pending", 0)]
    text = run("jobs", job.id, env=env)
    assert "worker died" in text.stdout and "interrupted" in text.stdout
