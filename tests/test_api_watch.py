"""`serve --watch`: the server indexes what arrives in its media roots, as jobs of its own, and a file moved
there keeps its entry (the real stages, through the session's pipeline)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.config import ApiSettings
from tests.conftest import make_settings, media

pytestmark = pytest.mark.slow


def wait_until(check: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_files_arriving_in_a_watched_root_are_indexed_and_a_moved_one_keeps_its_entry(
        tmp_path: Path, cache_dir: Path, embedder, pipeline) -> None:
    root = tmp_path / "root"
    root.mkdir()
    shutil.copyfile(media("audio/jfk.flac"), root / "jfk.flac")  # there before the server: indexed at the first look
    (root / "notes.txt").write_text("not media")
    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(media_roots=[root], watch_s=1, rate_limit_per_minute=0,
                                                              keys_db=tmp_path / "keys.db")})
    with TestClient(create_app(settings, embedder=embedder, pipeline=pipeline)) as client:
        def videos() -> dict[str, dict]:
            return {v["title"]: v for v in client.get("/videos").json()}

        wait_until(lambda: "jfk.flac" in videos(), "jfk.flac indexed")
        jfk = videos()["jfk.flac"]
        (root / "speeches").mkdir()
        (root / "jfk.flac").rename(root / "speeches" / "kennedy.flac")
        shutil.copyfile(media("audio/LJ002-0035.wav"), root / "speeches" / "press.wav")
        wait_until(lambda: set(videos()) == {"kennedy.flac", "press.wav"}, "the move and the new file")
        kennedy = videos()["kennedy.flac"]
        assert {k: kennedy[k] for k in ("video_id", "segments", "indexed_at")} == \
            {k: jfk[k] for k in ("video_id", "segments", "indexed_at")}  # moved, not indexed again
        hits = client.get("/search", params={"q": "ask not what your country can do for you"}).json()["hits"]
        assert hits[0]["source"] == str(root / "speeches" / "kennedy.flac")

        jobs = client.get("/jobs", params={"kind": "ingest"}).json()
        assert len(jobs) >= 2 and all(j["state"] in ("pending", "running", "done") for j in jobs)
        time.sleep(2.5)  # looks with nothing new make no job
        assert len(client.get("/jobs", params={"kind": "ingest"}).json()) == len(jobs)
