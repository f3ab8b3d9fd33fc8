"""Ingest jobs on the session's Ray pipeline: resume after an interruption, killed workers, timeouts, metadata.

Every test checks the invariant of the issue: each file is indexed exactly once and none is lost.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from pathlib import Path

import pytest

from mediaindex.config import Settings
from mediaindex.index.index import MediaIndex
from mediaindex.jobs import JobStore
from mediaindex.pipeline.spec import StageName, StageSpec
from mediaindex.service import FileOutcome, IngestHooks, IngestRequest, Pipeline, ingest
from tests.conftest import make_settings, media

pytestmark = pytest.mark.slow

# Short, distinct files (distinct content: copies of one file would be deduplicated by content hash).
SHORT = ["audio/jfk.flac", "audio/english.wav", "video/issue-134-rotate.mp4"]


@pytest.fixture
def job_settings(tmp_path: Path, cache_dir: Path) -> Settings:
    return make_settings(tmp_path / "idx", cache_dir)


def _open(settings: Settings, embedder) -> MediaIndex:
    return MediaIndex(settings, embedder.dim, embedder.name)


def _assert_each_indexed_once(index: MediaIndex, files: list[Path], *runs: list[FileOutcome]) -> None:
    indexed = Counter(o.path for run in runs for o in run if o.status == "indexed")
    assert indexed == Counter(str(f) for f in files), indexed  # once per file across all runs
    records = index.catalog.all()
    assert sorted(r.source for r in records) == sorted(str(f) for f in files)
    assert index.store.count() == sum(r.segments for r in records)  # no stray or duplicate points


def test_interrupted_job_resumes_and_indexes_each_file_once(tmp_path: Path, job_settings: Settings,
                                                             pipeline: Pipeline, embedder) -> None:
    from qdrant_edge import CountRequest, FieldCondition, Filter, MatchValue

    files = [media(rel) for rel in SHORT]
    manifest = tmp_path / "archive.csv"  # with per-file metadata that must reach the payload
    manifest.write_text("path,title,tags\n" + "".join(f"{f},Title {i},batch;n{i}\n" for i, f in enumerate(files)))
    first_run: list[FileOutcome] = []

    def stop_after_first(outcome: FileOutcome) -> None:
        first_run.append(outcome)
        if outcome.status == "indexed":
            raise KeyboardInterrupt  # what Ctrl-C does in the middle of a run

    jobs = JobStore(job_settings.index_dir / "jobs.db")
    job_ids: list[str] = []
    with _open(job_settings, embedder) as index:
        with pytest.raises(KeyboardInterrupt):
            ingest(IngestRequest(job_settings, manifests=[manifest], jobs=jobs), index, pipeline,
                   IngestHooks(on_file=stop_after_first, on_job=job_ids.append))
        (job_id,) = job_ids
        assert jobs.get(job_id).state == "cancelled"
        counts = jobs.counts(job_id)
        assert counts.get("done") == 1 and counts.get("pending") == len(files) - 1, counts
        first = next(f for f in jobs.files(job_id) if f.state == "done")
        assert first.video_id and index.catalog.by_source(first.path) is not None
        # A crash between writing the index and recording it leaves the file "running": it must
        # not be indexed again on resume.
        jobs.set_file(job_id, first.path, "running")

        resumed = ingest(IngestRequest(job_settings, resume=job_id, jobs=jobs), index, pipeline)
        assert resumed.job_id == job_id
        assert jobs.get(job_id).state == "done"
        assert {f.state for f in jobs.files(job_id)} == {"done"}
        assert {o.path: o.status for o in resumed.outcomes}[first.path] == "unchanged"
        _assert_each_indexed_once(index, files, first_run, resumed.outcomes)
        assert ingest(IngestRequest(job_settings, resume=job_id, jobs=jobs), index, pipeline).outcomes == []

        def count(key: str, value: str) -> int:
            flt = Filter(must=[FieldCondition(key=key, match=MatchValue(value))])
            return int(index.store._shard.count(CountRequest(filter=flt)))

        jfk = index.catalog.by_source(str(files[0]))
        assert count("extra.title", "Title 0") == jfk.segments > 0
        assert count("extra.tags", "n0") == jfk.segments
        assert count("extra.tags", "batch") == index.store.count()


def test_stage_actors_run_at_their_configured_priority(pipeline: Pipeline) -> None:
    """The CPU profile lets decode, vision and embed yield the cores to Whisper (ray.stages.<stage>.nice)."""
    import psutil
    import ray

    nice = {name: {psutil.Process(pid).nice() for pid in ray.get([a.pid.remote() for a in actors])}
            for name, actors in pipeline.actors.items()}
    base = nice.pop("speech").pop()  # the niceness Ray gives its workers
    assert nice == {"decode": {min(19, base + 4)}, "vision": {min(19, base + 4)}, "embed": {min(19, base + 4)}}


def test_killed_stage_actor_is_restarted_and_its_file_retried(job_settings: Settings, pipeline: Pipeline,
                                                              embedder) -> None:
    import ray
    from rich.console import Console

    from mediaindex.cli.progress import IngestDisplay

    files = [media(rel) for rel in SHORT]
    speech_dispatches: list[str] = []

    def kill_speech_on_second_file(stage: str, path: str) -> None:
        if stage == "speech":
            speech_dispatches.append(path)
            if len(speech_dispatches) == 2:
                ray.kill(pipeline.actors["speech"][0], no_restart=False)  # the file it holds dies with it

    buffer = io.StringIO()
    display = IngestDisplay(Console(file=buffer, width=200))  # not a terminal: plain lines
    jobs = JobStore(job_settings.index_dir / "jobs.db")
    with _open(job_settings, embedder) as index, display:
        hooks = IngestHooks(on_file=display.on_file, on_plan=display.on_plan, on_tick=display.on_tick,
                            on_job=display.on_job, on_dispatch=kill_speech_on_second_file)
        report = ingest(IngestRequest(job_settings, files, jobs=jobs), index, pipeline, hooks)
        assert len(speech_dispatches) == len(files)  # the retry was Ray's, on the restarted actor
        _assert_each_indexed_once(index, files, report.outcomes)
        assert jobs.get(report.job_id).state == "done"
        assert {(f.state, f.attempts) for f in jobs.files(report.job_id)} == {("done", 1)}
    lines = buffer.getvalue().splitlines()
    assert lines[0] == f"job {report.job_id}"
    assert any(line.startswith(f"indexed    {files[0]}: ") for line in lines)
    assert lines[-1].startswith(f"job {report.job_id}: 3/3 files (0 failed), 0:00:") and " of media in 0:0" in lines[-1]
    assert "speech " in lines[-1] and "x" in lines[-1]  # per-stage speed, as multiples of real time


class CrashOnPoison:
    """A stage whose worker process dies (as under the OOM killer) on every file named poison*."""

    def __init__(self, settings: Settings) -> None:
        self.log = settings.index_dir / "crash-log"

    def process(self, item):
        if Path(item.source).name.startswith("poison"):
            with self.log.open("a") as fh:
                fh.write(item.source + "\n")
            os._exit(1)
        return item


def test_worker_that_keeps_dying_fails_its_file_and_the_run_goes_on(tmp_path: Path, cache_dir: Path, ray_runtime,
                                                                   copy_media, embedder) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir, ingest={"max_retries": 1})
    settings.index_dir.mkdir(parents=True)
    # The crashing stage takes the vision stage's place on the route, after the decode.
    stages = [StageSpec(StageName.DECODE, cpus=0.25),
              StageSpec(StageName.VISION, "tests.test_scale:CrashOnPoison", cpus=0.25),
              StageSpec(StageName.EMBED, cpus=0.25)]
    poison, good = copy_media("audio/english.wav", "poison.wav"), copy_media("audio/LJ002-0035.wav")
    own = Pipeline(settings, stages)
    jobs = JobStore(settings.index_dir / "jobs.db")
    try:
        with _open(settings, embedder) as index:
            report = ingest(IngestRequest(settings, [poison, good], jobs=jobs), index, own)
            outcome = {Path(o.path).name: o for o in report.outcomes}
            assert outcome["LJ002-0035.wav"].status == "indexed"
            assert outcome["poison.wav"].status == "failed"
            assert outcome["poison.wav"].reason.startswith("worker died (1 retries): ")
            assert (settings.index_dir / "crash-log").read_text().splitlines() == [str(poison)] * 2  # 1 + 1 retry
            state = {Path(f.path).name: (f.state, f.reason) for f in jobs.files(report.job_id)}
            assert state["poison.wav"][0] == "failed" and "worker died" in state["poison.wav"][1]
            assert [r.source for r in index.catalog.all()] == [str(good)]
            assert jobs.get(report.job_id).state == "done"
    finally:
        own.close()


def test_a_file_over_the_timeout_fails_and_the_pipeline_recovers(tmp_path: Path, cache_dir: Path,
                                                                  pipeline: Pipeline, embedder) -> None:
    slow = make_settings(tmp_path / "idx", cache_dir, ingest={"file_timeout": 0.05})
    clip = media("audio/LJ002-0020.wav")  # probing, decoding and transcribing it each take longer than 0.05 s
    with _open(slow, embedder) as index:
        report = ingest(IngestRequest(slow, [clip]), index, pipeline)
        (outcome,) = report.outcomes
        assert outcome.status == "failed"
        assert outcome.reason.startswith("timed out after 0.05 s in the ")
        assert index.catalog.all() == []
    normal = make_settings(tmp_path / "idx", cache_dir)
    with _open(normal, embedder) as index:  # the restarted actor serves the next run
        again = ingest(IngestRequest(normal, [clip]), index, pipeline)
        assert [o.status for o in again.outcomes] == ["indexed"]


def test_a_stage_asking_for_a_gpu_the_cluster_lacks_is_refused_before_starting(tmp_path: Path, cache_dir: Path,
                                                                               ray_runtime) -> None:
    from mediaindex.workers.pool import StageStartError

    settings = make_settings(tmp_path / "idx", cache_dir, speech={"device": "cuda"},
                             ray={"stages": {"speech": {"gpus": 0.25}}})
    with pytest.raises(StageStartError, match=r"the speech stage asks for 0\.25 GPU per actor but the Ray cluster "
                                              r"has 0: lower ray\.stages\.speech\.gpus"):
        Pipeline(settings)


def test_a_pipeline_that_does_not_fit_beside_other_actors_says_who_holds_the_cpus(ray_runtime) -> None:
    import ray

    from mediaindex.workers.pool import StageStartError, _wait_for_room

    @ray.remote
    class CpuHolder:
        def ready(self) -> bool:
            return True

    free = ray.available_resources().get("CPU", 0.0)
    holder = CpuHolder.options(num_cpus=free).remote()  # type: ignore[attr-defined]
    try:
        ray.get(holder.ready.remote())
        with pytest.raises(StageStartError, match=r"the pipeline needs 0\.5 CPU \(free: 0\), held by other actors "
                                                  r"in this Ray cluster \(.*CpuHolder ×1.*\): close the other"):
            _wait_for_room([StageSpec(StageName.DECODE, cpus=0.5)], grace=0.0)
    finally:
        ray.kill(holder)
