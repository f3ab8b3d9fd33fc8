"""Transcript export: SRT, WebVTT and JSON from a video's stored speech segments, and the CLI command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediaindex.index.transcript import export, to_srt, to_vtt
from tests.conftest import REPO, make_settings, media

SEGMENTS = [
    {"start": 3725.5, "end": 3727.25, "text": "  second -->  line ", "language": "en", "confidence": -0.3,
     "extra": {"words": [[3725.5, 3726.0, "second"], [3726.1, 3727.2, "line"]]}},
    {"start": 0.0, "end": 1.0049, "text": "First.", "language": "en", "confidence": -0.1, "extra": {}},
    {"start": 5.0, "end": 6.0, "text": "   ", "language": "en", "confidence": -0.2, "extra": {}},
]


def test_srt_and_vtt_are_well_formed() -> None:
    srt = to_srt(SEGMENTS)
    assert srt == ("1\n00:00:00,000 --> 00:00:01,005\nFirst.\n\n"
                   "2\n01:02:05,500 --> 01:02:07,250\nsecond --> line\n")
    vtt = to_vtt(SEGMENTS)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.005\nFirst.\n")
    assert "01:02:05.500 --> 01:02:07.250\nsecond -> line\n" in vtt  # "-->" is not allowed in a cue


def test_json_keeps_words_and_confidence() -> None:
    data = json.loads(export(SEGMENTS, "json", {"video_id": "v1", "language": "en"}))
    assert data["video_id"] == "v1" and [s["start"] for s in data["segments"]] == [0.0, 5.0, 3725.5]
    assert data["segments"][2]["words"][1] == {"start": 3726.1, "end": 3727.2, "word": "line"}
    assert data["segments"][2]["avg_logprob"] == -0.3
    with pytest.raises(ValueError, match="unknown transcript format 'doc'"):
        export(SEGMENTS, "doc", {})


slow = pytest.mark.slow


@pytest.fixture(scope="module")
def transcript_index(tmp_path_factory: pytest.TempPathFactory, pipeline, embedder, cache_dir: Path):
    from mediaindex.index.index import MediaIndex
    from mediaindex.ingest.run import IngestRequest, ingest

    settings = make_settings(tmp_path_factory.mktemp("transcript-index"), cache_dir)
    clip = media("audio/jfk.flac")
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [clip, media("video/cockatoo.mp4")]), index, pipeline)
        assert len(report.indexed) == 2
        ids = {Path(o.path).name: o.video_id for o in report.indexed}
    return settings.index_dir, ids


def _cli(*args: str, index: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run([sys.executable, "-m", "mediaindex", "transcript", *args, "--index", str(index)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


@slow
def test_transcript_command_prints_each_format(transcript_index) -> None:
    index, ids = transcript_index
    srt = _cli(str(media("audio/jfk.flac")), index=index)
    assert srt.returncode == 0, srt.stderr
    assert srt.stdout.startswith("1\n00:00:0") and "ask not what your country can do for you" in srt.stdout
    vtt = _cli(ids["jfk.flac"], "--format", "vtt", index=index)  # by video id
    assert vtt.returncode == 0 and vtt.stdout.startswith("WEBVTT\n\n")
    data = json.loads(_cli(ids["jfk.flac"], "-f", "json", index=index).stdout)
    assert data["language"] == "en" and data["source"] == str(media("audio/jfk.flac"))
    americans = next(w for s in data["segments"] for w in s["words"] if w["word"].startswith("Americans"))
    assert abs(americans["start"] - 1.8) < 0.3
    assert all(s["avg_logprob"] < 0 for s in data["segments"])
    silent = _cli(ids["cockatoo.mp4"], "--format", "srt", index=index)
    assert silent.returncode == 0 and silent.stdout == "" and "no speech" in silent.stderr


@slow
def test_transcript_command_refuses_bad_input(transcript_index, tmp_path: Path) -> None:
    index, _ = transcript_index
    bad_format = _cli(str(media("audio/jfk.flac")), "--format", "docx", index=index)
    assert bad_format.returncode == 2 and "unknown transcript format 'docx'" in bad_format.stderr
    unknown = _cli(str(tmp_path / "never-ingested.mp4"), index=index)
    assert unknown.returncode == 2 and "not in the index" in unknown.stderr
    no_index = _cli("abc", index=tmp_path / "nothing-here")
    assert no_index.returncode == 2 and "no index at" in no_index.stderr
    for result in (bad_format, unknown, no_index):
        assert "Traceback" not in result.stderr
