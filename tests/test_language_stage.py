"""The language stage (ingest.summaries): per-video summaries and chapters written while indexing.

One pipeline with a language stage per module: the real default model (SmolLM2-135M in the serving engine, few
tokens) summarises real media inside Ray, and the summary and chapter segments land in a real index. The same
pipeline indexes a file without summaries (passing its language stage by) and summarises it in a later run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mediaindex.agents import jobs as agent_jobs
from mediaindex.agents.citations import CitationRef, check
from mediaindex.agents.llm import Completion, Message
from mediaindex.agents.schema import VideoSummary
from mediaindex.agents.stored import CHAPTER, STORED_NOTE, SUMMARY, stored_summary
from mediaindex.agents.tools import Archive
from mediaindex.config import Settings, load_settings
from mediaindex.errors import ConfigError, MediaIndexError
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.jobs import JobStore
from mediaindex.media.probe import MediaInfo
from mediaindex.pipeline.spec import StageName, StageSpec, default_stages
from mediaindex.pipeline.stages.item import MediaItem
from mediaindex.pipeline.stages.summary import SummaryStage, indexed_item
from mediaindex.segments import MEDIA_MODALITIES, Segment
from tests.conftest import make_settings, media

SPEECH = "video/manifesto.mp4"  # 88 s of continuous speech
SILENT = "video/cockatoo.mp4"  # 14 s, digitally silent audio, no on-screen text: pictures only
LATER = "audio/jfk.flac"  # 11 s of speech: indexed first without summaries, summarised by a later run
SLACK = 0.5  # seconds: container durations and segment ends differ by a few frames


# -- the switch, without Ray ---------------------------------------------------------------------------------------
def test_switch_off_by_default_adds_no_stage(cache_dir: Path, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, cache_dir)
    assert settings.ingest.summaries is False
    assert "summary" not in [s.name for s in default_stages(settings)]


def test_switch_on_adds_the_summary_stage_before_embed(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_INGEST__SUMMARIES", "1")
    stages = default_stages(make_settings(tmp_path, cache_dir))
    assert [s.name for s in stages] == ["decode", "speech", "vision", "summary", "embed"]
    summary = stages[3]
    assert (summary.workers, summary.cpus, summary.gpus, summary.settings_key) == (1, 1.0, 0.0, "ray.stages.summary")
    # The GPU profile gives the language model half a GPU; on the CPU it reserves none.
    gpu = {s.name: s.gpus for s in default_stages(load_settings("gpu", cache_dir=cache_dir))}
    assert gpu["summary"] == 0.5 and gpu["speech"] == 0.25
    on_cpu = load_settings("gpu", cache_dir=cache_dir, llm={"device": "cpu"})
    assert {s.name: s.gpus for s in default_stages(on_cpu)}["summary"] == 0.0


@pytest.mark.parametrize("value", ["maybe", "2", "yes please"])
def test_bad_switch_value_is_a_clear_error(value: str, monkeypatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_INGEST__SUMMARIES", value)
    with pytest.raises(ConfigError, match=r"ingest\.summaries: Input should be a valid boolean"):
        load_settings("cpu")


def test_new_modalities_are_filters() -> None:
    from mediaindex.api.models import Filters

    assert SearchFilters(modality="chapter,summary").modalities == ("chapter", "summary")
    assert Filters(modality="chapter").modality == "chapter"
    with pytest.raises(ValueError, match="use one of speech, ocr, visual, subtitle, marker, summary, chapter"):
        SearchFilters(modality="chapters")


def test_a_model_caught_in_a_loop_is_not_a_summary() -> None:
    from mediaindex.agents.grounding import repetitive

    # SmolLM2's own output on a manifesto.mp4 chapter with 32 tokens.
    assert repetitive('The document is titled "The Party of the Party of the Party of the Party of the Party')
    assert not repetitive("The spectre of communism is already acknowledged by all European powers.")
    assert not repetitive("Party, party, party.")  # too short to tell


def test_a_quote_of_the_source_is_supported_even_without_content_words() -> None:
    from mediaindex.agents.grounding import supported

    # On-screen letters of letter_blocks.mp4 and a subtitle run cut by the extractive fallback: the source's own words.
    assert supported("S C / D", "S C / D")
    narration = "It began long before us. We who now live our perfect and dull endless lives."
    assert supported("It began long before us. We who now live …", narration)
    assert not supported("D / S C", "S C / D")  # not in the source's order
    assert not supported("It began long before the moon.", narration)  # a word of its own: no quote, no support


def test_cli_flag_turns_the_stage_on(monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import mediaindex.service.run as ingest_module
    from mediaindex.cli import app
    from mediaindex.pipeline.run import FileOutcome, IngestReport

    seen: list[bool] = []
    path = str(media("audio/jfk.flac"))

    def fake_ingest(request, index, pipeline=None, hooks=None) -> IngestReport:  # records what the CLI built
        seen.append(request.settings.ingest.summaries)
        return IngestReport(job_id="x", outcomes=[FileOutcome(path, "summarised", segments=2)])

    monkeypatch.setattr(ingest_module, "ingest", fake_ingest)
    runner = CliRunner()
    for flag, expected in (("--summaries", True), ("--no-summaries", False)):
        result = runner.invoke(app, ["ingest", path, "--index", str(tmp_path / "idx"), flag])
        assert seen.pop() is expected
        # A file indexed earlier that only got its summary counts as work done.
        assert result.exit_code == 0 and "done: 1 summarised (job" in result.output, result.output


# -- one real ingest with summaries ------------------------------------------------------------------------------
def make_summary_settings(index_dir: Path, cache_dir: Path, summaries: bool = True) -> Settings:
    # Few tokens: SmolLM2 on two shared cores. Small logical CPU shares so this pipeline fits beside the
    # session's own pipeline and language-model actor in the one Ray of the test session.
    cpus = {stage: {"cpus": 0.15} for stage in ("decode", "speech", "vision", "summary", "embed")}
    return make_settings(index_dir, cache_dir, ingest={"summaries": summaries},
                         llm={"max_new_tokens": 32, "max_chapters": 3}, ray={"stages": cpus})


@pytest.fixture(scope="module")
def summary_settings(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Settings:
    return make_summary_settings(tmp_path_factory.mktemp("summaries-index"), cache_dir)


@pytest.fixture(scope="module")
def summary_pipeline(summary_settings: Settings, ray_runtime):
    from mediaindex.service import Pipeline

    pipeline = Pipeline(summary_settings)
    assert [s.name for s in pipeline.stages][-2:] == ["summary", "embed"]
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="module")
def archive(summary_settings: Settings, summary_pipeline, embedder):
    from mediaindex.index.index import open_index
    from mediaindex.service import IngestRequest, ingest

    # Thread-safe, as `serve` opens it: the file API test serves this index.
    index = open_index(summary_settings, embedder.dim, embedder.name, thread_safe=True)
    report = ingest(IngestRequest(summary_settings, [media(SPEECH), media(SILENT)]), index, summary_pipeline)
    assert len(report.indexed) == 2, [(o.path, o.reason) for o in report.outcomes]
    assert not any(n.startswith("no summary") for o in report.indexed for n in o.notes)
    yield Archive(index, embedder)
    index.close()


def _video(archive: Archive, rel: str):
    record = archive.resolve(Path(rel).name)
    assert record is not None
    return record


def _of(archive: Archive, rel: str, modality: str) -> list[dict]:
    return archive.index.store.segments_of(_video(archive, rel).video_id, modality=modality)


@pytest.mark.slow
@pytest.mark.llm
def test_summary_and_chapters_are_segments_inside_the_video(archive: Archive) -> None:
    record = _video(archive, SPEECH)
    summaries, chapters = _of(archive, SPEECH, SUMMARY), _of(archive, SPEECH, CHAPTER)
    assert len(summaries) == 1 and 1 <= len(chapters) <= 3
    for seg in summaries + chapters:
        assert 0 <= seg["start"] < seg["end"] <= record.duration + SLACK, seg
        assert seg["text"].strip() and seg["video_id"] == record.video_id
    # Chapters follow each other in time and the summary spans them.
    spans = [(c["start"], c["end"]) for c in chapters]
    assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:], strict=False))
    assert summaries[0]["start"] == spans[0][0] and summaries[0]["end"] == max(e for _, e in spans)
    # Every citation is a run of indexed speech or on-screen-text segments of this video (the transcript
    # window a chapter's sentence came from): it starts where one starts and ends where one ends.
    # (Ends may be cut to the container's duration, as the summariser reads them.)
    indexed = [s for m in ("speech", "ocr") for s in _of(archive, SPEECH, m)]
    starts, ends = {round(s["start"], 2) for s in indexed}, [s["end"] for s in indexed]

    def ends_a_segment(end: float) -> bool:
        return any(abs(end - e) <= 0.01 for e in ends) or end >= record.duration - 0.01 and max(ends) >= end

    for ch in chapters:
        cites = ch["extra"][CHAPTER]["citations"]
        assert cites and all(round(c["start"], 2) in starts and ends_a_segment(c["end"]) for c in cites), cites
        refs = [CitationRef(c["video_id"], c["start"], c["end"]) for c in cites]
        assert check(archive, refs)[1] == []
        assert all(c["start"] < ch["end"] and c["end"] > ch["start"] for c in cites)
    # The catalog counts the new segments with the others.
    assert record.segments == sum(len(_of(archive, SPEECH, m)) for m in ("speech", "ocr", "visual", SUMMARY, CHAPTER))


@pytest.mark.slow
@pytest.mark.llm
def test_a_topic_search_finds_the_chapter(archive: Archive) -> None:
    # Adjacent chapters found together merge into one moment; the moment shows the best chapter's text.
    for ch in _of(archive, SPEECH, CHAPTER):
        title = ch["extra"][CHAPTER]["title"]
        hits = archive.search(title, modality=CHAPTER, limit=3)
        assert hits and hits[0].text == ch["text"] and hits[0].start <= ch["start"] < ch["end"] <= hits[0].end + 0.01
    summary = _of(archive, SPEECH, SUMMARY)[0]
    assert archive.search(summary["text"][:200], modality=SUMMARY)[0].text == summary["text"]
    # Unfiltered, the topic leads to the right video.
    from mediaindex.search.searcher import search

    assert search(archive.index, archive.embedder, summary["text"][:200], limit=5)[0].video_id == summary["video_id"]
    # The agents search (and cite) the media itself unless they ask for summaries or chapters.
    assert {h.modality for h in archive.search(summary["text"][:200], limit=10)} <= set(MEDIA_MODALITIES)


@pytest.mark.slow
@pytest.mark.llm
def test_a_video_without_speech_or_text_gets_visual_concepts_or_nothing(archive: Archive) -> None:
    texts = [s for m in ("speech", "ocr") for s in _of(archive, SILENT, m)]
    visual = {s["text"].strip() for s in _of(archive, SILENT, "visual")}
    summaries = _of(archive, SILENT, SUMMARY)
    assert not texts and _of(archive, SILENT, CHAPTER) == []
    if not visual:
        assert summaries == []
        return
    stored = VideoSummary.model_validate(summaries[0]["extra"][SUMMARY])
    assert stored.status == "visual_only" and stored.windows == 0  # the model was not asked to invent anything
    assert {c.summary.removeprefix("Visual concepts: ").removesuffix(".") for c in stored.chapters} <= visual


@pytest.mark.slow
def test_the_file_api_gives_the_stored_summary_and_its_chapters(archive: Archive, summary_settings: Settings,
                                                               tmp_path: Path) -> None:
    """GET /videos/{id} (what the web page shows) carries the summary made at ingest, chapters in time order;
    a file with nothing to summarise has none."""
    from fastapi.testclient import TestClient

    from mediaindex.api import create_app
    from mediaindex.config import ApiSettings
    from tests.conftest import MEDIA

    settings = summary_settings.model_copy(update={"api": ApiSettings(
        media_roots=[MEDIA], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    stored = stored_summary(archive, Path(SPEECH).name)
    assert stored is not None
    with TestClient(create_app(settings, index=archive.index, embedder=archive.embedder)) as client:
        detail = client.get(f"/videos/{_video(archive, SPEECH).video_id}")
        assert detail.status_code == 200, detail.text
        summary = detail.json()["summary"]
        assert summary["text"] == stored.summary and summary["model"] == "smollm2"
        assert [(c["title"], c["start"], c["end"]) for c in summary["chapters"]] == [
            (c.title, c.start, c.end) for c in stored.chapters]
        assert [c["start"] for c in summary["chapters"]] == sorted(c["start"] for c in summary["chapters"])
        silent = client.get(f"/videos/{_video(archive, SILENT).video_id}").json()
        assert (silent["summary"] is None) == (stored_summary(archive, Path(SILENT).name) is None)


class NoModel:
    """A ChatModel that must not be used: the stored summary is enough."""

    name = "none"
    max_context = 2048

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        self.calls += 1
        return [Completion("", "stop", 0) for _ in conversations]


@pytest.mark.slow
@pytest.mark.llm
def test_summarize_returns_the_stored_summary(archive: Archive, summary_settings: Settings) -> None:
    stored = stored_summary(archive, Path(SPEECH).name)
    assert stored is not None and stored.status == "summarised" and stored.model == "smollm2"
    assert STORED_NOTE in stored.notes
    assert [(c.start, c.end) for c in stored.chapters] == [(c["start"], c["end"]) for c in _of(archive, SPEECH, CHAPTER)]
    assert stored_summary(archive, "nope.mp4") is None

    model = NoModel()
    job_id = agent_jobs.submit_summarize(summary_settings, Path(SPEECH).name)
    job = agent_jobs.run_summarize_job(summary_settings, job_id, llm=model, archive=archive)
    assert job.state == "done", job.error
    assert model.calls == 0 and job.result["output"]["summary"] == stored.summary
    assert "## Chapters" in job.result["markdown"]

    # --recompute runs the summariser again over the indexed segments (not over its own summary segments).
    job_id = agent_jobs.submit_summarize(summary_settings, Path(SPEECH).name, recompute=True)
    job = agent_jobs.run_summarize_job(summary_settings, job_id, llm=model, archive=archive)
    assert job.state == "done", job.error
    out = VideoSummary.model_validate(job.result["output"])
    assert model.calls >= 1 and out.model == "none" and STORED_NOTE not in out.notes
    assert all(c.modality in ("speech", "ocr") for ch in out.chapters for c in ch.citations)


@pytest.mark.slow
def test_a_summary_of_pictures_alone_starts_no_language_model(archive: Archive, summary_settings: Settings) -> None:
    """Recomputed without a model handed in: the pictures' summary needs none, so none starts (nor Ray for it)."""
    events: list[str] = []

    def no_ray(_: Settings) -> None:
        raise AssertionError("Ray was started for a summary that needs no language model")

    job_id = agent_jobs.submit_summarize(summary_settings, Path(SILENT).name, recompute=True)
    job = agent_jobs.run_summarize_job(summary_settings, job_id, archive=archive, start_ray=no_ray,
                                   on_event=lambda e: events.append(e.text))
    assert job.state == "done", job.error
    assert job.result["output"]["summary"].startswith("No speech or on-screen text; from the visual concepts only")
    assert not any("starting the language model" in e for e in events), events


@pytest.mark.slow
def test_summary_stage_resources_are_checked(summary_settings: Settings, ray_runtime) -> None:
    from mediaindex.service import Pipeline
    from mediaindex.workers.pool import StageStartError

    greedy = make_summary_settings(summary_settings.index_dir, summary_settings.cache_dir)
    greedy.ray.stages.summary.cpus = 1000
    with pytest.raises(StageStartError,
                       match=r"the summary stage asks for 1000 CPU .* lower ray\.stages\.summary\.cpus"):
        Pipeline(greedy)


# -- files indexed without summaries, summarised by a later run ----------------------------------------------------
def _generated(index: MediaIndex, video_id: str) -> tuple[list[dict], list[dict]]:
    return index.store.segments_of(video_id, modality=SUMMARY), index.store.segments_of(video_id, modality=CHAPTER)


@pytest.mark.slow
@pytest.mark.llm
def test_a_later_run_with_summaries_summarises_an_indexed_file_once(summary_pipeline, tmp_path: Path,
                                                                     cache_dir: Path, embedder) -> None:
    from mediaindex.service import IngestHooks, IngestRequest, ingest

    off = make_summary_settings(tmp_path / "idx", cache_dir, summaries=False)
    on = make_summary_settings(tmp_path / "idx", cache_dir, summaries=True)
    clip = media(LATER)
    stages: list[str] = []  # the stages each run sent the file to

    def run(settings: Settings):  # -> IngestReport
        stages.clear()
        return ingest(IngestRequest(settings, [clip]), index, summary_pipeline,
                      IngestHooks(on_dispatch=lambda st, _: stages.append(st)))

    with MediaIndex(off, embedder.dim, embedder.name) as index:
        # 1. Indexed without summaries: the pipeline's language stage is passed by.
        assert [o.status for o in run(off).outcomes] == ["indexed"]
        assert "summary" not in stages and "speech" in stages
        before = index.catalog.by_source(str(clip))
        speech = index.store.segments_of(before.video_id, modality="speech")
        assert speech and _generated(index, before.video_id) == ([], [])

        # 2. With summaries: summarised from the index, not decoded or transcribed again.
        second = run(on)
        (outcome,) = second.outcomes
        assert (outcome.status, outcome.video_id) == ("summarised", before.video_id), outcome
        assert stages == ["summary", "embed"]
        summaries, chapters = _generated(index, before.video_id)
        assert len(summaries) == 1 and len(chapters) >= 1 and outcome.segments == 1 + len(chapters)
        stored = VideoSummary.model_validate(summaries[0]["extra"][SUMMARY])
        assert stored.status == "summarised" and stored.model == "smollm2" and stored.summary == summaries[0]["text"]
        for seg in summaries + chapters:
            assert seg["text"].strip() and 0 <= seg["start"] < seg["end"] <= before.duration + SLACK, seg
        # The file was not indexed again: the same speech segments, the same catalog entry but for the count.
        assert index.store.segments_of(before.video_id, modality="speech") == speech
        after = index.catalog.by_source(str(clip))
        assert after.indexed_at == before.indexed_at and after.content_hash == before.content_hash
        assert after.segments == before.segments + outcome.segments == index.store.count(
            SearchFilters(video_id=before.video_id))  # no duplicates
        jobs = JobStore(on.index_dir / "jobs.db")
        try:
            assert [(f.state, f.video_id) for f in jobs.files(second.job_id)] == [("done", before.video_id)]
            assert jobs.get(second.job_id).params["summaries"] is True
        finally:
            jobs.close()
        # `mediaindex summarize` and searches find it like a summary made at first ingest.
        archive = Archive(index, embedder)
        assert stored_summary(archive, str(clip)).summary == stored.summary
        assert archive.search(stored.summary, modality=SUMMARY, limit=1)[0].video_id == before.video_id

        # 3. Again with summaries: the stored summary is left alone.
        third = run(on)
        assert [(o.status, o.reason) for o in third.outcomes] == [("unchanged", "already indexed")]
        assert stages == []
        assert _generated(index, before.video_id) == (summaries, chapters)
        assert index.catalog.by_source(str(clip)) == after


def test_an_indexed_file_is_read_back_as_the_language_stage_needs_it(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    info = MediaInfo(path="/m/a.mp4", size=10, duration=12.0, container="mp4", has_audio=True, has_video=True)
    record = VideoRecord(video_id="v1", source="/m/a.mp4", content_hash="h", size=10, mtime_ns=5, duration=12.0,
                         language="en", segments=3, indexed_at=1.0,
                         probe={**info.to_dict(), "written_by_a_later_version": 1})
    segments = [
        Segment("v1", "/m/a.mp4", 0.0, 4.0, "speech", "hello there", "en", -0.2, "v1/0.jpg", {"title": "A"}),
        Segment("v1", "/m/a.mp4", 5.0, 9.0, "visual", "a dog", None, 0.9, "v1/5.jpg"),
        Segment("v1", "/m/a.mp4", 6.0, 8.0, "speech", "good dog", "en", -0.1, "v1/5.jpg"),
    ]
    with MediaIndex(settings, 4, "test-embedder", extra_dims={}) as index:
        index.replace_video(record, segments, np.eye(3, 4, dtype=np.float32))
        item = indexed_item(index, "v1")
        with pytest.raises(MediaIndexError, match="no longer in the index"):
            indexed_item(index, "v2")
    assert (item.source, item.video_id, item.language, item.info) == (record.source, "v1", "en", info)
    assert item.segments == segments  # time order, every field but the vectors, which the summariser does not read
    # Summary and chapter segments get the thumbnail of the keyframe before their start, as at first ingest.
    assert [item.thumbnail_at(t) for t in (0.0, 4.9, 5.0, 11.0)] == ["v1/0.jpg", "v1/0.jpg", "v1/5.jpg", "v1/5.jpg"]


BROKEN = "english.wav"  # the model fails on this file's summary


class BrokenModel(NoModel):
    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        raise RuntimeError("the model ran out of memory")


class ExtractiveSummaryStage(SummaryStage):
    """The language stage without a language model: the summariser falls back on the transcript's own words, and
    on BROKEN the model fails. Each file it gets is logged, to count the summaries made."""

    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.text_embed import load_text_embedder

        self.settings = settings
        self.embedder = load_text_embedder(settings.embed)
        self.log = settings.index_dir / "language-log"

    def process(self, item: MediaItem) -> MediaItem:
        with self.log.open("a") as fh:
            fh.write(Path(item.source).name + "\n")
        self.llm = BrokenModel() if Path(item.source).name == BROKEN else NoModel()
        return super().process(item)


@pytest.mark.slow
def test_summaries_of_indexed_files_fail_alone_and_a_stopped_job_resumes(tmp_path: Path, cache_dir: Path,
                                                                         ray_runtime, embedder) -> None:
    from mediaindex.service import (
        FileOutcome,
        IngestHooks,
        IngestRequest,
        Pipeline,
        ingest,
        with_choices,
    )

    # One file at a time, so the run can be stopped between the two files.
    settings = make_settings(tmp_path / "idx", cache_dir, ray={"max_files_in_flight": 1})
    settings.index_dir.mkdir(parents=True)
    log = settings.index_dir / "language-log"
    # Small CPU shares: the module's shared pipeline (summary_pipeline) still holds its actors in the same Ray.
    stages = [StageSpec(StageName.DECODE, cpus=0.1), StageSpec(StageName.SPEECH, cpus=0.1),
              StageSpec(StageName.SUMMARY, "tests.test_language_stage:ExtractiveSummaryStage", cpus=0.1),
              StageSpec(StageName.EMBED, cpus=0.1)]
    files = [media(LATER), media(f"audio/{BROKEN}")]
    own = Pipeline(settings, stages)
    jobs = JobStore(settings.index_dir / "jobs.db")
    try:
        with MediaIndex(settings, embedder.dim, embedder.name) as index:
            first_run = ingest(IngestRequest(settings, files, jobs=jobs), index, own)
            assert [o.status for o in first_run.outcomes] == ["indexed"] * 2
            assert not log.exists()
            counts = {r.source: r.segments for r in index.catalog.all()}

            first: list[FileOutcome] = []
            job_ids: list[str] = []

            def stop_after_first(outcome: FileOutcome) -> None:
                first.append(outcome)
                raise KeyboardInterrupt  # Ctrl-C after the first summary

            with pytest.raises(KeyboardInterrupt):
                ingest(IngestRequest(with_choices(settings, summaries=True), files, jobs=jobs), index, own,
                       IngestHooks(on_file=stop_after_first, on_job=job_ids.append))
            (job_id,) = job_ids
            assert [(Path(o.path).name, o.status) for o in first] == [("jfk.flac", "summarised")]
            assert [(Path(f.path).name, f.state) for f in jobs.files(job_id)] == [("jfk.flac", "done"),
                                                                                 (BROKEN, "pending")]
            # Resumed without asking for summaries: the job was started with them, so it finishes them. The
            # model's failure fails that file alone, with the reason, and the job completes.
            resumed = ingest(IngestRequest(settings, resume=job_id, jobs=jobs), index, own)
            assert [(Path(o.path).name, o.status, o.reason) for o in resumed.outcomes] == [
                (BROKEN, "failed", "summary failed: RuntimeError: the model ran out of memory")]
            assert jobs.get(job_id).state == "done"
            state = {Path(f.path).name: (f.state, f.reason) for f in jobs.files(job_id)}
            assert state == {"jfk.flac": ("done", ""), BROKEN: ("failed", resumed.outcomes[0].reason)}
            assert log.read_text().splitlines() == ["jfk.flac", BROKEN]  # each file went to the model once

            # One summary for the summarised file, none for the other, and nothing else changed.
            jfk, broken = (index.catalog.by_source(str(f)) for f in files)
            assert [len(_generated(index, r.video_id)[0]) for r in (jfk, broken)] == [1, 0]
            assert broken.segments == counts[str(files[1])]
            assert jfk.segments > counts[str(files[0])]
            assert index.store.count() == jfk.segments + broken.segments
    finally:
        jobs.close()
        own.close()
