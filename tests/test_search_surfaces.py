"""One searcher behind every surface: the CLI, the API and the agents' search tool give the same hits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.agents.tools import Archive
from mediaindex.api import create_app
from tests.conftest import REPO
from tests.test_api_support import Sample, sample  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

QUERIES = ["ask not what your country can do for you", "banana", "an example video",
           "quantum chromodynamics on a lattice", "Fragt nicht, was euer Land für euch tun kann"]


def _key(video_id: str, start: float, end: float, modality: str, band: str | None) -> tuple:
    return video_id, round(start, 2), round(end, 2), modality, band


def _cli(sample: Sample, cache_dir: Path, tmp: Path, query: str) -> list[dict]:  # noqa: F811
    """`mediaindex search --json` in its own process; it reads through this process, which holds the index."""
    env = {**os.environ, "MEDIAINDEX_CACHE_DIR": str(cache_dir), "MEDIAINDEX_TEMP_DIR": str(tmp)}
    result = subprocess.run(
        [sys.executable, "-m", "mediaindex", "search", query, "--json", "--limit", "5", "--config", "cpu",
         "--index", str(sample.settings.index_dir)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cli_api_and_ask_give_the_same_hits(sample: Sample, cache_dir: Path,  # noqa: F811
                                            tmp_path: Path) -> None:
    app = create_app(sample.app_settings(tmp_path), index=sample.index, embedder=sample.embedder,
                     pipeline=sample.pipeline)
    archive = Archive(sample.index, sample.embedder, sample.settings.vision)
    with TestClient(app, raise_server_exceptions=False) as client:
        for query in QUERIES:
            r = client.get("/search", params={"q": query, "limit": 5})
            assert r.status_code == 200, r.text
            api = [_key(h["video_id"], h["start"], h["end"], h["modality"], h["band"]) for h in r.json()["hits"]]
            tool = [_key(h.video_id, h.start, h.end, h.modality, h.band)
                    for h in archive.run_tool("search", {"query": query, "limit": 5, "min_confidence": "low"}).moments]
            cli = [_key(h["video_id"], h["start"], h["end"], h["modality"], h["band"])
                   for h in _cli(sample, cache_dir, tmp_path, query)]
            assert api == tool == cli, query
            if not query.startswith("quantum"):
                assert api and api[0][4] is not None
        # The agents search deeper by default: every ranked moment, for the language model to judge.
        deep = archive.run_tool("search", {"query": QUERIES[0], "limit": 10}).moments
        assert len(deep) >= len(client.get("/search", params={"q": QUERIES[0], "limit": 10}).json()["hits"])


def test_a_hit_plays_from_the_matched_word(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    app = create_app(sample.app_settings(tmp_path), index=sample.index, embedder=sample.embedder,
                     pipeline=sample.pipeline)
    with TestClient(app, raise_server_exceptions=False) as client:
        hits = client.get("/search", params={"q": "banana", "limit": 3}).json()["hits"]
    # auto-editor_example.mp4: "When the time reaches 40 seconds, I will say banana." ... "Banana."
    best = hits[0]
    assert best["title"] == "auto-editor_example.mp4" and best["modality"] == "speech"
    assert best["seek"] is not None and abs(best["seek"] - 40.0) <= 1.0, best
    assert best["play_url"].endswith(f"#t={best['seek']:.2f}")
    assert best["end"] - best["start"] <= 12.0  # the sentence, not the surrounding 40 seconds
