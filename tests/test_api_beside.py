"""The CLI beside a running `serve`: commands go through the server that holds the index, the others say
which process holds it, a failed attempt leaves no job behind, and a SIGKILLed server frees the index.

Real processes throughout: `serve`, the CLI commands and a plain Python process holding the index.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import MEDIA, REPO, cli_environment, hold_index, media, wait_until_ready
from tests.test_api_support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.beside]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, str]:
    env = cli_environment(tmp_path_factory.mktemp("beside-index"), cache_dir, tmp_path_factory.mktemp("bt"))
    env.pop("MEDIAINDEX_API_KEY", None)
    return env


def cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def said(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stdout + result.stderr).split())


@pytest.fixture(scope="module")
def served(env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port),
                             "--media-root", str(MEDIA / "audio")], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, proc, timeout=180)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_commands_go_through_the_server_that_holds_the_index(served, env: dict[str, str]) -> None:
    url, proc = served
    holder = json.loads((Path(env["MEDIAINDEX_INDEX_DIR"]) / "holder.json").read_text())
    assert {k: holder[k] for k in ("pid", "command", "url")} == {"pid": proc.pid, "command": "mediaindex serve",
                                                                 "url": url}

    ingested = cli("ingest", str(media("audio/jfk.flac")), str(media("audio/LJ002-0035.wav")), env=env)
    assert ingested.returncode == 0, said(ingested)
    assert f"held by `mediaindex serve` (pid {proc.pid}, answering at {url})" in said(ingested)
    assert "jfk.flac" in ingested.stderr and "(job " in ingested.stderr

    found = cli("search", "ask not what your country can do for you", "--json", env=env)
    assert found.returncode == 0, said(found)
    hits = json.loads(found.stdout)
    assert hits and Path(hits[0]["source"]).name == "jfk.flac"
    # A manifest's values for a file indexed already reach it in place; a search may ask for them.
    manifest = Path(env["MEDIAINDEX_TEMP_DIR"]) / "talks.csv"
    manifest.write_text(f"path,tags\n{media('audio/jfk.flac')},inaugural;1961\n")
    tagged = cli("ingest", "--manifest", str(manifest), env=env)
    assert tagged.returncode == 0 and "already indexed; its metadata updated (tags)" in said(tagged), said(tagged)
    only = cli("search", "country", "--where", "tags=1961", "--json", "--min-confidence", "none", env=env)
    assert {Path(h["source"]).name for h in json.loads(only.stdout)} == {"jfk.flac"}, said(only)
    none = cli("search", "country", "--where", "tags=1962", env=env)
    assert none.stdout == "no moments match: nothing indexed passes these filters\n", said(none)
    misspelt = cli("search", "country", "--where", "Tag=1961", env=env)  # the keys come from the server's files
    assert " ".join(misspelt.stdout.split()) == ("no moments match: no indexed file has the metadata key 'Tag' (the "
                                                 "keys they have: tags)"), said(misspelt)
    listed = cli("index", "list", "--where", "tags=1961", "--json", env=env)
    assert [(Path(f["source"]).name, f["metadata"]) for f in json.loads(listed.stdout)] == [
        ("jfk.flac", {"tags": ["inaugural", "1961"]})], said(listed)

    outside = cli("ingest", str(media("video/chaplin.mp4")), env=env)  # not under the server's media roots
    assert outside.returncode == 2 and "outside the configured media roots" in said(outside)
    narrowed = cli("search", "country", "--under", str(MEDIA / "audio"), "--from", "5", "--to", "9", "--by-file",
                   "--json", env=env)
    assert narrowed.returncode == 0, said(narrowed)
    assert [Path(f["source"]).name for f in json.loads(narrowed.stdout)] == ["jfk.flac"]
    assert all(m["end"] >= 5 and m["start"] <= 9 for m in json.loads(narrowed.stdout)[0]["moments"])
    elsewhere = cli("search", "country", "--under", str(MEDIA / "video"), "--json", env=env)
    assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout) == []
    raw = cli("search", "country", "--segments", env=env)
    assert raw.returncode == 2 and "through it, search takes" in said(raw)
    stats = cli("index", "stats", env=env)
    assert stats.returncode == 2 and f"held by `mediaindex serve` (pid {proc.pid}" in said(stats)
    assert "ingest still running" not in said(stats) and "Traceback" not in stats.stderr

    removed = cli("index", "remove", "LJ002-0035.wav", env=env)
    assert removed.returncode == 0, said(removed)
    assert f"removed {media('audio/LJ002-0035.wav')} (" in said(removed)
    assert [v["title"] for v in httpx.get(f"{url}/videos", timeout=10).json()] == ["jfk.flac"]
    unknown = cli("index", "remove", "LJ002-0035.wav", env=env)
    assert unknown.returncode == 2 and "nothing in the index is named 'LJ002-0035.wav'" in said(unknown)


def test_ctrl_c_on_a_question_through_the_server_cancels_the_servers_job(served, env: dict[str, str]) -> None:
    """Ctrl-C in `mediaindex ask` while the server runs its job: the command says so and exits 130; the
    server's job ends cancelled before its next language-model call instead of answering for no one."""
    url, _ = served
    asking = subprocess.Popen([sys.executable, "-m", "mediaindex", "ask", "What does Kennedy ask of Americans?"],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def asked() -> dict | None:
        return next(iter(httpx.get(f"{url}/jobs", params={"kind": "ask", "limit": 1}, timeout=10).json()), None)

    deadline = time.monotonic() + 120
    while (job := asked()) is None or job["state"] == "pending":
        assert asking.poll() is None and time.monotonic() < deadline, asking.communicate()
        time.sleep(0.2)
    assert job["state"] == "running", job
    asking.send_signal(signal.SIGINT)
    out, err = asking.communicate(timeout=60)
    assert asking.returncode == 130, out + err
    assert " ".join(err.split()).endswith("stopped: the question job is cancelled") and "Traceback" not in err
    while (job := asked())["state"] == "running":
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert (job["state"], job["error"]) == ("cancelled", "stopped before its next language-model call"), job


def test_a_killed_server_frees_the_index_and_a_held_index_leaves_no_failed_job(served, env: dict[str, str]) -> None:
    _, proc = served
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # Its record stays behind with a dead pid: ignored, and the index opens here.
    found = cli("search", "ask not what your country can do for you", "--json", env=env)
    assert found.returncode == 0, said(found)
    assert Path(json.loads(found.stdout)[0]["source"]).name == "jfk.flac"

    holding = hold_index(env)
    try:
        before = json.loads(cli("jobs", "--json", env=env).stdout)
        refused = cli("ingest", "--no-wait", str(media("audio/english.wav")), env=env)
        assert refused.returncode == 2, said(refused)
        assert "held by `python" in said(refused) and f"(pid {holding.pid})" in said(refused)
        assert json.loads(cli("jobs", "--json", env=env).stdout) == before  # no failed ingest job recorded
        stats = cli("index", "stats", "--json", env=env)  # a reader reads through the process holding it
        assert stats.returncode == 0 and json.loads(stats.stdout)["files"] == 1, said(stats)
    finally:
        holding.send_signal(signal.SIGKILL)
        holding.wait(timeout=30)
