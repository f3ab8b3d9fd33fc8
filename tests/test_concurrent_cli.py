"""Searches, stats and other ingests beside a running `mediaindex ingest`, each its own process, as users run
them in several terminals: the reads answer through the ingest, a second ingest waits for it (or, with
--no-wait, is refused plainly), the ingest finishes, and every file is in the index exactly once. A reader
whose holder is killed reads again, holding the index itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mediaindex.index.catalog import VideoRecord, now
from mediaindex.index.filters import SearchFilters
from mediaindex.index.holder import read_holder
from mediaindex.index.index import MediaIndex, open_index
from tests.conftest import REPO, cli_environment, hold_index, make_settings, media
from tests.corpus import references

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # waits on the `mediaindex` processes it runs

FIRST = ["audio/LJ002-0020.wav", "audio/LJ002-0035.wav", "audio/english.wav", "audio/jfk.flac"]
SECOND = ["audio/jfk.flac", "audio/hotwords.mp3"]  # one file both ingests were given


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mediaindex", *args], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=300)


def said(out: str, err: str) -> str:
    return " ".join((out + err).split())


def test_reads_and_a_second_ingest_beside_a_running_ingest(tmp_path: Path, cache_dir: Path, embedder) -> None:
    index_dir = tmp_path / "index"
    env = cli_environment(index_dir, cache_dir, tmp_path / "t")
    ingest = start("ingest", *(str(media(f)) for f in FIRST), env=env)
    deadline = time.monotonic() + 120
    while (holder := read_holder(index_dir)) is None or holder.socket is None:
        assert ingest.poll() is None and time.monotonic() < deadline, "the ingest did not take the index"
        time.sleep(0.2)
    assert holder.pid == ingest.pid and holder.command == "mediaindex ingest"

    waiting = start("ingest", *(str(media(f)) for f in SECOND), env=env)
    refused = run("ingest", "--no-wait", str(media("audio/apollo11.mp3")), env=env)
    assert refused.returncode == 2, said(refused.stdout, refused.stderr)
    assert f"held by `mediaindex ingest` (pid {ingest.pid})" in said(refused.stdout, refused.stderr)

    reads: list[tuple[str, int, str, str, bool]] = []  # (command, exit code, stdout, stderr, ingest still running)
    while ingest.poll() is None:
        for args in (["search", "ask not what your country can do for you", "--json"], ["index", "stats", "--json"]):
            done = run(*args, env=env)
            reads.append((args[0], done.returncode, done.stdout, done.stderr, ingest.poll() is None))
    out, err = ingest.communicate()
    assert ingest.returncode == 0, said(out, err)
    w_out, w_err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, said(w_out, w_err)
    assert f"waiting for `mediaindex ingest` (pid {ingest.pid}) to finish" in w_err
    assert "hotwords.mp3" in w_err and "already indexed" in w_err

    assert all("Traceback" not in stdout + stderr for _, _, stdout, stderr, _ in reads), reads
    assert all(code == 0 for _, code, _, _, _ in reads), reads
    during = [(cmd, stdout, stderr) for cmd, _, stdout, stderr, running in reads if running]
    assert {cmd for cmd, _, _ in during} == {"search", "index"}, reads  # both kinds answered while it wrote
    assert any(f"reading through `mediaindex ingest` (pid {ingest.pid})" in said_ for _, _, said_ in during)
    for cmd, text, _ in during:
        if cmd == "index":
            assert json.loads(text)["files"] <= len(FIRST)
        elif hits := json.loads(text):
            assert Path(hits[0]["source"]).name == "jfk.flac"

    settings = make_settings(index_dir, cache_dir)
    with open_index(settings, embedder.dim, embedder.name, must_exist=True) as index:
        records = index.catalog.all()
        expected = {str(media(f)) for f in FIRST + SECOND}
        assert sorted(r.source for r in records) == sorted(expected)  # each file once
        for r in records:
            assert index.store.count(SearchFilters(video_id=r.video_id)) == r.segments > 0, r.source
        assert index.store.count() == sum(r.segments for r in records)  # no point outside the catalog
    assert read_holder(index_dir) is None


def test_a_reader_takes_the_index_over_when_its_holder_is_killed(tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / "index", cache_dir)
    segs = references()
    with MediaIndex(settings, embedder.dim, embedder.name) as index:  # written as an ingest writes: catalog too
        for vid in sorted({s.video_id for s in segs}):
            mine = [s for s in segs if s.video_id == vid]
            record = VideoRecord(vid, mine[0].source, vid, 1, 1, max(s.end for s in mine), None, len(mine), {}, now())
            index.replace_video(record, mine, embedder.embed_passages([s.text for s in mine]))
    env = cli_environment(settings.index_dir, cache_dir, tmp_path / "t")
    holding = hold_index(env)
    try:
        with MediaIndex(settings, embedder.dim, embedder.name) as reader:
            assert reader.store.count() == len(segs) and not reader.store.holds
            os.kill(holding.pid, signal.SIGKILL)
            holding.wait(timeout=30)
            query = embedder.embed_query("ask not what your country can do for you")
            assert reader.store.search(query, 1)[0].source.endswith("jfk.flac")  # read again, here
            assert reader.store.holds
    finally:
        if holding.poll() is None:
            holding.kill()
            holding.wait(timeout=30)
