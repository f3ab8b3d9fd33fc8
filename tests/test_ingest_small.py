"""Small jobs run their stages in the ingesting process (no Ray); larger ones, or with in-process runs turned off,
on Ray. Both give the same segments for the same files; a stage that cannot load stops the run with its name."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediaindex.config import Settings
from mediaindex.errors import ConfigError
from mediaindex.index.index import MediaIndex
from mediaindex.models.vision import vector_dims
from mediaindex.pipeline.plan import Outcome, Plan
from mediaindex.pipeline.small import has_pictures, in_process
from mediaindex.pipeline.stages.registry import StageName
from mediaindex.service import IngestHooks, IngestRequest, ingest
from mediaindex.workers.pool import StageStartError
from tests.conftest import REPO, make_settings, media

pytestmark = pytest.mark.slow

FILES = ["audio/jfk.flac", "video/issue-134-rotate.mp4"]


def _plans(*rels: str) -> list[Plan]:
    return [Plan(str(media(r)), Outcome.NEW) for r in rels]


def _segments(index: MediaIndex, video_id: str) -> list[tuple[str, float, float, str]]:
    return sorted((h["modality"], round(h["start"], 2), round(h["end"], 2), h["text"])
                  for h in index.store.segments_of(video_id))


def _run(settings: Settings, embedder, caplog: pytest.LogCaptureFixture) -> tuple[dict, list[str]]:
    settings.index_dir.mkdir(parents=True, exist_ok=True)
    caplog.clear()
    ticks: list[dict[str, dict[str, float | None]]] = []  # the files in the stages, as each tick saw them
    hooks = IngestHooks(on_tick=lambda stats: ticks.append({p: dict(s) for p, s in stats.working.items()}))
    with caplog.at_level(logging.INFO, logger="mediaindex"), \
            MediaIndex(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision)) as index:
        report = ingest(IngestRequest(settings, [media(f) for f in FILES]), index, hooks=hooks)
        assert sorted(Path(o.path).name for o in report.indexed) == sorted(Path(f).name for f in FILES), \
            report.outcomes
        found = {Path(o.path).name: _segments(index, o.video_id or "") for o in report.indexed}
    # While it ran, the progress named files of the job and stages of the pipeline, with shares between 0 and 1;
    # the last tick has nothing left in the stages.
    during = [stages for tick in ticks for path, stages in tick.items() if path in {str(media(f)) for f in FILES}]
    assert during and {stage for stages in during for stage in stages} <= {s.value for s in StageName}, ticks
    assert all(0.0 <= share <= 1.0 for stages in during for share in stages.values() if share is not None)
    assert ticks[-1] == {}
    return found, [r.getMessage() for r in caplog.records]


def test_a_small_job_runs_in_process_with_the_segments_of_the_ray_path(tmp_path: Path, cache_dir: Path, embedder,
                                                                      ray_runtime, caplog) -> None:
    small = make_settings(tmp_path / "small", cache_dir)
    local, log_local = _run(small, embedder, caplog)
    assert any("the stages (decode, speech, vision, embed) run in this process" in m for m in log_local), log_local
    assert any("first file written (searchable)" in m for m in log_local), log_local

    on_ray = make_settings(tmp_path / "ray", cache_dir, ingest={"in_process_max_files": 0})
    remote, log_ray = _run(on_ray, embedder, caplog)
    assert any("the stages run on Ray" in m for m in log_ray), log_ray
    assert local == remote
    jfk = [text for modality, _, _, text in local["jfk.flac"] if modality == "speech"]
    assert any("ask not what your country can do for you" in t.lower() for t in jfk), jfk
    assert {m for m, *_ in local["issue-134-rotate.mp4"]} >= {"visual"}


def test_the_size_of_a_job_decides_where_it_runs(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "i", cache_dir)
    choice = in_process(settings, _plans("audio/jfk.flac"))
    assert choice.local and "1 file, 11 s of media" in choice.why
    assert not has_pictures(_plans("audio/jfk.flac")) and has_pictures(_plans(*FILES))

    few_seconds = make_settings(tmp_path / "i", cache_dir, ingest={"in_process_max_seconds": 5})
    choice = in_process(few_seconds, _plans("audio/jfk.flac"))
    assert not choice.local and "11 s of media > ingest.in_process_max_seconds 5" in choice.why

    one_file = make_settings(tmp_path / "i", cache_dir, ingest={"in_process_max_files": 1})
    choice = in_process(one_file, _plans(*FILES))
    assert not choice.local and "2 files > ingest.in_process_max_files 1" in choice.why

    with_summaries = make_settings(tmp_path / "i", cache_dir, ingest={"summaries": True})
    assert not in_process(with_summaries, _plans("audio/jfk.flac")).local


def test_an_audio_only_small_job_loads_no_vision_model(tmp_path: Path, cache_dir: Path, embedder, caplog) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    settings.index_dir.mkdir(parents=True)
    with caplog.at_level(logging.INFO, logger="mediaindex.pipeline"), \
            MediaIndex(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision)) as index:
        report = ingest(IngestRequest(settings, [media("audio/jfk.flac")]), index)
    assert [o.status for o in report.outcomes] == ["indexed"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("the stages (decode, speech, embed) run in this process" in m for m in messages), messages
    assert not any(m.startswith("stage vision") for m in messages), messages


def test_a_stage_that_cannot_load_stops_the_small_job_with_its_name(tmp_path: Path, cache_dir: Path,
                                                                    embedder) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir, speech={"model": str(tmp_path / "no-such-model")})
    settings.index_dir.mkdir(parents=True)
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision)) as index, \
            pytest.raises(StageStartError, match="the speech stage could not start"):
        ingest(IngestRequest(settings, [media("audio/jfk.flac")]), index)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("in_process_max_files", -1, "ingest.in_process_max_files: Input should be greater than or equal to 0"),
    ("in_process_max_seconds", "soon", "ingest.in_process_max_seconds: Input should be a valid number"),
])
def test_an_invalid_threshold_is_refused_clearly(tmp_path: Path, key: str, value: object, message: str) -> None:
    from mediaindex.config import load_settings

    with pytest.raises(ConfigError, match=message):
        load_settings("cpu", ingest={key: value})
    env = {**os.environ, f"MEDIAINDEX_INGEST__{key.upper()}": str(value), "MEDIAINDEX_INDEX_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "mediaindex", "ingest", str(media("audio/jfk.flac"))],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert result.returncode == 2 and message in " ".join(result.stderr.split()), result.stderr
