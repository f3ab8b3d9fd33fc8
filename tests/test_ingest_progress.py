"""How far a long file has got while the stages work on it: the stages tell, the executors ask, the display says."""

from __future__ import annotations

import time

import pytest

from mediaindex.config import Settings
from mediaindex.pipeline.inprocess import InProcessExecutor
from mediaindex.pipeline.progress import IngestStats, StageStats
from mediaindex.pipeline.stages.registry import StageName
from mediaindex.pipeline.stages.speech import SpeechResult, SpeechStage
from tests.conftest import media

pytestmark = pytest.mark.slow


def poll(read, done, every: float = 0.005, limit: float = 120.0) -> list[float]:
    """The values `read()` gives until `done()`, None left out."""
    seen: list[float] = []
    end = time.monotonic() + limit
    while not done() and time.monotonic() < end:
        value = read()
        if value is not None:
            seen.append(value)
        time.sleep(every)
    return seen


def test_speech_tells_how_far_it_has_transcribed_a_file_while_it_runs(settings: Settings) -> None:
    # Chunks of 30 s: the manifesto's 88 s of speech are read and transcribed in three.
    quick = settings.model_copy(update={"speech": settings.speech.model_copy(update={
        "model": "tiny.en", "chunk_seconds": 30.0, "diarize": False})})
    stage = SpeechStage(quick)
    executor = InProcessExecutor({StageName.SPEECH: lambda: stage}, built={StageName.SPEECH: [stage]})
    task = executor.submit(StageName.SPEECH, [str(media("video/manifesto.mp4"))])
    seen = poll(lambda: executor.progress([task]).get(task), lambda: task.result.done)
    result = executor.fetch([task.result])[0]
    assert isinstance(result, SpeechResult) and "communis" in " ".join(s.text for s in result.segments).lower()
    assert seen and seen == sorted(seen) and all(0.0 <= s <= 1.0 for s in seen), seen
    assert seen[0] == 0.0 and any(0.0 < s < 1.0 for s in seen), sorted(set(seen))  # it moved along the file
    assert stage.progress() is None and executor.progress([task]) == {}  # between files: nothing to tell


def test_a_busy_stage_actor_answers_how_far_it_is(pipeline) -> None:
    executor = pipeline.executor()
    task = executor.submit(StageName.SPEECH, [str(media("audio/jfk.flac"))])
    seen = poll(lambda: executor.progress([task]).get(task), lambda: bool(executor.wait([task], 0.0)), every=0.05)
    assert seen and all(0.0 <= s <= 1.0 for s in seen), seen  # answered while `process` ran
    assert "ask not what your country" in " ".join(s.text for s in executor.fetch([task.result])[0].segments)
    assert executor.progress([task]) == {}


def test_the_progress_line_names_the_files_in_the_stages_and_counts_them_in_the_eta() -> None:
    stats = IngestStats("j1", total=2, stages=[StageStats(StageName.SPEECH, 1)])
    stats.started -= 60.0
    assert stats.eta is None and stats.now() == ""
    stats.working = {"/archive/talk one.mp4": {"decode": None, "speech": 0.25}}
    stats.began = {"/archive/talk one.mp4": {"decode": stats.started, "speech": stats.started}}
    assert stats.eta == pytest.approx(60.0 / 0.25 * 1.75, rel=0.01)  # a quarter of one file in a minute
    # Its pictures, started 50 s later, are 5 % through in 10 s: 190 s left, more than speech's 180 s.
    stats.working["/archive/talk one.mp4"]["vision"] = 0.05
    stats.began["/archive/talk one.mp4"]["vision"] = stats.started + 50.0
    assert stats.under_way == pytest.approx(60.0 / 250.0, rel=0.01)
    del stats.working["/archive/talk one.mp4"]["vision"]
    assert stats.line().endswith("; now talk one.mp4 decode speech 25%")
    stats.working = {f"/a/{n}.mp4": {"vision": 0.5} for n in ("a", "b", "c\nd")}
    assert stats.now() == "a.mp4 vision 50%; b.mp4 vision 50% (+1 more)"
    assert stats.now(most=3).endswith("c\\nd.mp4 vision 50%")  # a name is shown on one line
    stats.working, stats.done = {}, 2
    assert stats.eta is None and "now" not in stats.line()
