"""The language stage (ingest.summaries): per-video summaries and chapters written while indexing.

One real ingest per module: the real default model (SmolLM2-135M in the serving engine, few tokens) summarises
real media inside the Ray pipeline, and the summary and chapter segments land in a real index.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex import agents
from mediaindex.agents import Archive
from mediaindex.agents.citations import CitationRef, check
from mediaindex.agents.llm import Completion, Message
from mediaindex.agents.schema import VideoSummary
from mediaindex.agents.stored import CHAPTER, STORED_NOTE, SUMMARY, stored_summary
from mediaindex.config import Settings, load_settings
from mediaindex.errors import ConfigError
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.segments import MEDIA_MODALITIES
from mediaindex.workers.stages import default_stages
from tests.conftest import make_settings, media

SPEECH = "video/manifesto.mp4"  # 88 s of continuous speech
SILENT = "video/cockatoo.mp4"  # 14 s, digitally silent audio, no on-screen text: pictures only
SLACK = 0.5  # seconds: container durations and segment ends differ by a few frames


# -- the switch, without Ray ---------------------------------------------------------------------------------------
def test_switch_off_by_default_adds_no_stage(cache_dir: Path, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, cache_dir)
    assert settings.ingest.summaries is False
    assert "language" not in [s.name for s in default_stages(settings)]


def test_switch_on_adds_the_language_stage_before_embed(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_INGEST__SUMMARIES", "1")
    stages = default_stages(make_settings(tmp_path, cache_dir))
    assert [s.name for s in stages] == ["decode", "speech", "vision", "language", "embed"]
    language = stages[3]
    assert (language.workers, language.cpus, language.gpus, language.settings_key) == (1, 1.0, 0.0, "llm")
    # The GPU profile gives the language model half a GPU; on the CPU it reserves none.
    gpu = {s.name: s.gpus for s in default_stages(load_settings("gpu", cache_dir=cache_dir))}
    assert gpu["language"] == 0.5 and gpu["speech"] == 0.25
    on_cpu = load_settings("gpu", cache_dir=cache_dir, llm={"device": "cpu"})
    assert {s.name: s.gpus for s in default_stages(on_cpu)}["language"] == 0.0


@pytest.mark.parametrize("value", ["maybe", "2", "yes please"])
def test_bad_switch_value_is_a_clear_error(value: str, monkeypatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_INGEST__SUMMARIES", value)
    with pytest.raises(ConfigError, match=r"ingest\.summaries: Input should be a valid boolean"):
        load_settings("cpu")


def test_new_modalities_are_filters() -> None:
    from mediaindex.api.models import Filters

    assert SearchFilters(modality="chapter,summary").modalities == ("chapter", "summary")
    assert Filters(modality="chapter").modality == "chapter"
    with pytest.raises(ValueError, match="use one of speech, ocr, visual, summary, chapter"):
        SearchFilters(modality="chapters")


def test_a_model_caught_in_a_loop_is_not_a_summary() -> None:
    from mediaindex.agents.grounding import repetitive

    # SmolLM2's own output on a manifesto.mp4 chapter with 32 tokens.
    assert repetitive('The document is titled "The Party of the Party of the Party of the Party of the Party')
    assert not repetitive("The spectre of communism is already acknowledged by all European powers.")
    assert not repetitive("Party, party, party.")  # too short to tell


def test_cli_flag_turns_the_stage_on(monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import mediaindex.pipeline.ingest as ingest_module
    from mediaindex.cli import app
    from mediaindex.pipeline.ingest import IngestReport

    seen: list[bool] = []

    def fake_ingest(paths, settings: Settings, index, **kwargs) -> IngestReport:  # records what the CLI built
        seen.append(settings.ingest.summaries)
        return IngestReport(job_id="x")

    monkeypatch.setattr(ingest_module, "ingest", fake_ingest)
    runner = CliRunner()
    path = str(media("audio/jfk.flac"))
    for flag, expected in (("--summaries", True), ("--no-summaries", False)):
        runner.invoke(app, ["ingest", path, "--index", str(tmp_path / "idx"), flag])
        assert seen.pop() is expected


# -- one real ingest with summaries ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def summary_settings(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Settings:
    # Few tokens: SmolLM2 on two shared cores. Small logical CPU shares so this pipeline fits beside the
    # session's own pipeline and language-model actor in the one Ray of the test session.
    cpus = {f"{stage}_cpus": 0.25 for stage in ("decode", "speech", "vision", "embed", "llm")}
    return make_settings(tmp_path_factory.mktemp("summaries-index"), cache_dir, ingest={"summaries": True},
                         llm={"max_new_tokens": 32, "max_chapters": 3}, ray=cpus)


@pytest.fixture(scope="module")
def archive(summary_settings: Settings, ray_runtime, embedder):
    from mediaindex.pipeline.ingest import Pipeline, ingest

    pipeline = Pipeline(summary_settings)
    assert [s.name for s in pipeline.stages][-2:] == ["language", "embed"]
    index = MediaIndex(summary_settings, embedder.dim, embedder.name)
    try:
        report = ingest([media(SPEECH), media(SILENT)], summary_settings, index, pipeline=pipeline)
    finally:
        pipeline.close()
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
    # Every citation names an indexed speech or on-screen-text segment of this video.
    # (Ends may be cut to the container's duration, as the summariser reads them.)
    indexed = {round(s["start"], 2): s["end"] for m in ("speech", "ocr") for s in _of(archive, SPEECH, m)}
    for ch in chapters:
        cites = ch["extra"][CHAPTER]["citations"]
        assert cites and all(c["start"] in indexed and c["end"] <= indexed[c["start"]] + 0.01 for c in cites), cites
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
    from mediaindex.index.search import search

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


class NoModel:
    """A ChatModel that must not be used: the stored summary is enough."""

    name = "none"
    max_context = 2048

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0) -> list[Completion]:
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
    job_id = agents.submit_summarize(summary_settings, Path(SPEECH).name)
    job = agents.run_summarize_job(summary_settings, job_id, llm=model, archive=archive)
    assert job.state == "done", job.error
    assert model.calls == 0 and job.result["output"]["summary"] == stored.summary
    assert "## Chapters" in job.result["markdown"]

    # --recompute runs the summariser again over the indexed segments (not over its own summary segments).
    job_id = agents.submit_summarize(summary_settings, Path(SPEECH).name, recompute=True)
    job = agents.run_summarize_job(summary_settings, job_id, llm=model, archive=archive)
    assert job.state == "done", job.error
    out = VideoSummary.model_validate(job.result["output"])
    assert model.calls >= 1 and out.model == "none" and STORED_NOTE not in out.notes
    assert all(c.modality in ("speech", "ocr") for ch in out.chapters for c in ch.citations)


@pytest.mark.slow
def test_language_stage_resources_are_checked(summary_settings: Settings, ray_runtime) -> None:
    from mediaindex.pipeline.ingest import Pipeline
    from mediaindex.workers.pool import StageStartError

    greedy = summary_settings.model_copy(update={"ray": summary_settings.ray.model_copy(update={"llm_cpus": 1000})})
    with pytest.raises(StageStartError, match=r"the language stage asks for 1000 CPU .* lower ray\.llm_cpus"):
        Pipeline(greedy)
