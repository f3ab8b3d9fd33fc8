"""The ingest scheduler on the in-process executor: branches, joins, retries, timeouts, interrupts, charging.

The decode stage is the real one (probe and hash of real media); the stages after it are small classes that
record what they were given, so each test can say exactly which call saw what.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediaindex.config import Settings
from mediaindex.errors import StageError, WorkerLostError
from mediaindex.pipeline.inprocess import InProcessExecutor
from mediaindex.pipeline.plan import Outcome, Plan
from mediaindex.pipeline.route import FULL_ROUTE, Route
from mediaindex.pipeline.scheduler import IngestStalled, Scheduler, SchedulerHooks
from mediaindex.pipeline.stages.decode import DecodeStage
from mediaindex.pipeline.stages.item import MediaItem
from mediaindex.pipeline.stages.registry import StageName
from mediaindex.pipeline.stages.speech import SpeechResult
from mediaindex.segments import Segment
from tests.conftest import REPO, media

D, S, V, E = StageName.DECODE, StageName.SPEECH, StageName.VISION, StageName.EMBED
ORDER = [D, S, V, E]
CLIPS = ["audio/jfk.flac", "audio/english.wav", "audio/LJ002-0020.wav", "audio/LJ002-0035.wav"]


class Heard:
    """Speech beside decode: one segment naming the file (the join sets its video id)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate

    def process(self, path: str) -> SpeechResult:
        if self.gate is not None:
            assert self.gate.wait(10), "speech waited for a decode that never started"
        seg = Segment(video_id="", source=path, start=0.0, end=1.0, modality="speech", text=f"heard {Path(path).name}")
        return SpeechResult(segments=[seg], language="en")


class Seen:
    """A stage on the decode branch: notes that it saw the item."""

    def __init__(self, log: list[str], slow: str = "", seconds: float = 0.0, die_on: str = "",
                 deaths: list[str] | None = None) -> None:
        self.log, self.slow, self.seconds, self.die_on, self.deaths = log, slow, seconds, die_on, deaths

    def process(self, item: MediaItem) -> MediaItem:
        name = Path(item.source).name
        if self.die_on and name.startswith(self.die_on) and self.deaths is not None:
            self.deaths.append(name)
            if len(self.deaths) <= 1 or self.die_on == "poison":
                raise WorkerLostError(f"worker running {name} died")
        if self.slow and name == self.slow:
            time.sleep(self.seconds)
        self.log.append(name)
        item.notes.append("seen")
        return item


class Embedded:
    """The last stage: what it got is what the writer would get."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log

    def process(self, item: MediaItem) -> MediaItem:
        self.log.append((Path(item.source).name, len(item.segments)))
        return item


def _settings_decode(settings: Settings) -> Callable[[], DecodeStage]:
    return lambda: DecodeStage(settings)


def _run(scheduler: Scheduler, executor: InProcessExecutor, limit: float = 30.0) -> dict[str, Any]:
    """Step until done; each file's merged item, or its error's reason."""
    from mediaindex.pipeline.stages.merge import merge

    out: dict[str, Any] = {}
    deadline = time.monotonic() + limit
    while not scheduler.done:
        assert time.monotonic() < deadline, "the scheduler did not finish"
        for f in scheduler.step():
            try:  # an error travels with the results until they are fetched, as in Ray's object store
                out[Path(f.plan.path).name] = f.error.reason if f.error else merge(executor.fetch(f.results))
            except StageError as exc:
                out[Path(f.plan.path).name] = exc.reason
    return out


def _plans(paths: list[Path]) -> list[Plan]:
    return [Plan(str(p), Outcome.NEW) for p in paths]


def test_branches_start_side_by_side_and_join_before_the_stages_after_them(settings: Settings) -> None:
    gate = threading.Event()
    seen: list[str] = []
    embedded: list[tuple[str, int]] = []

    class OpensTheGate(DecodeStage):
        def process(self, path: str) -> MediaItem:
            gate.set()  # speech is already waiting on its branch: both started from the path
            return super().process(path)

    executor = InProcessExecutor({D: lambda: OpensTheGate(settings), S: lambda: Heard(gate),
                                  V: lambda: Seen(seen), E: lambda: Embedded(embedded)})
    scheduler = Scheduler(executor, ORDER, window=4, timeout=60)
    route = FULL_ROUTE.only(ORDER)
    assert route == Route(branches=((D, V), (S,)), then=(E,))
    clip = media(CLIPS[0])
    scheduler.add(Plan(str(clip), Outcome.NEW), route, lambda: str(clip))
    (item,) = _run(scheduler, executor).values()
    assert embedded == [("jfk.flac", 1)]  # embed got the decoded item with the transcript joined in
    assert item.segments[0].text == "heard jfk.flac" and item.segments[0].video_id == item.video_id
    assert item.notes[-1] == "seen" and item.language == "en"


def test_a_failed_branch_fails_its_file_alone_and_the_later_stages_never_see_it(settings: Settings,
                                                                                 tmp_path: Path) -> None:
    bad = tmp_path / "notes.mp4"
    bad.write_text("this is a text file, not a video\n")
    seen: list[str] = []
    embedded: list[tuple[str, int]] = []
    executor = InProcessExecutor({D: _settings_decode(settings), S: Heard, V: lambda: Seen(seen),
                                  E: lambda: Embedded(embedded)})
    scheduler = Scheduler(executor, ORDER, window=4, timeout=60)
    good = media(CLIPS[1])
    for plan in _plans([bad, good]):
        scheduler.add(plan, FULL_ROUTE.only(ORDER), lambda plan=plan: plan.path)
    out = _run(scheduler, executor)
    assert isinstance(out["english.wav"], MediaItem)
    assert isinstance(out["notes.mp4"], str) and out["notes.mp4"]  # the decoder's reason, for the user
    assert seen == ["english.wav"] and embedded == [("english.wav", 1)]


@pytest.mark.parametrize(("die_on", "expected"), [("english", "item"), ("poison", "worker died (2 retries): ")])
def test_a_lost_worker_is_rebuilt_and_its_call_retried(settings: Settings, copy_media, die_on: str,
                                                       expected: str) -> None:
    clip = copy_media("audio/english.wav", "poison.wav" if die_on == "poison" else "english.wav")
    deaths: list[str] = []
    built: list[int] = []

    def seen() -> Seen:
        built.append(1)
        return Seen([], die_on=die_on, deaths=deaths)

    executor = InProcessExecutor({D: _settings_decode(settings), V: seen, E: lambda: Embedded([])}, retries=2)
    scheduler = Scheduler(executor, [D, V, E], window=2, timeout=60)
    scheduler.add(Plan(str(clip), Outcome.NEW), FULL_ROUTE.only([D, V, E]), lambda: str(clip))
    (result,) = _run(scheduler, executor).values()
    if expected == "item":
        assert isinstance(result, MediaItem) and deaths == ["english.wav"] * 2 and len(built) == 2
    else:
        assert result.startswith(expected) and deaths == ["poison.wav"] * 3 and len(built) == 4


def test_a_call_over_the_timeout_fails_its_file_and_a_fresh_worker_takes_the_next(settings: Settings) -> None:
    seen: list[str] = []
    executor = InProcessExecutor({D: _settings_decode(settings), V: lambda: Seen(seen, slow="jfk.flac", seconds=3),
                                  E: lambda: Embedded([])})
    scheduler = Scheduler(executor, [D, V, E], window=1, timeout=0.5)
    slow, quick = media(CLIPS[0]), media(CLIPS[1])
    for plan in _plans([slow, quick]):
        scheduler.add(plan, FULL_ROUTE.only([D, V, E]), lambda plan=plan: plan.path)
    started = time.monotonic()
    out = _run(scheduler, executor)
    assert out["jfk.flac"] == "timed out after 0.5 s in the vision stage"
    assert isinstance(out["english.wav"], MediaItem)
    assert time.monotonic() - started < 2.5  # the next file did not wait for the stuck call
    assert seen == ["english.wav"]


def test_only_files_a_stage_works_on_are_charged_and_stop_hands_back_those_in_flight(settings: Settings) -> None:
    release = threading.Event()

    class Stuck(Seen):
        def process(self, item: MediaItem) -> MediaItem:
            release.wait(10)
            return super().process(item)

    charged: dict[str, int] = {}  # per file: calls started while none ran, minus the ends of its work

    def on_work(plan: Plan, working: bool) -> None:
        name = Path(plan.path).name
        charged[name] = charged.get(name, 0) + (1 if working else -1)

    executor = InProcessExecutor({D: _settings_decode(settings), V: lambda: Stuck([]), E: lambda: Embedded([])})
    scheduler = Scheduler(executor, [D, V, E], window=3, timeout=60, hooks=SchedulerHooks(on_work=on_work))
    for plan in _plans([media(c) for c in CLIPS]):
        scheduler.add(plan, FULL_ROUTE.only([D, V, E]), lambda plan=plan: plan.path)
    deadline = time.monotonic() + 10
    while len(charged) < 3 and time.monotonic() < deadline:
        assert scheduler.step() == []
    for _ in range(3):
        scheduler.step()
    # Three files fit the window: the first is stuck in vision (in a stage's hands, charged); the next two were
    # decoded and wait for vision (charged nothing: no stage works on them); the fourth was never admitted.
    assert charged == {"jfk.flac": 1, "english.wav": 0, "LJ002-0020.wav": 0}
    stopped = scheduler.stop()  # Ctrl-C, a cancel: what was in flight goes back, its charge given back
    release.set()
    assert sorted(Path(p.path).name for p in stopped) == ["LJ002-0020.wav", "english.wav", "jfk.flac"]
    assert charged == {"jfk.flac": 0, "english.wav": 0, "LJ002-0020.wav": 0} and scheduler.done


def test_an_item_from_the_index_takes_the_stages_after_the_branches_only(settings: Settings) -> None:
    embedded: list[tuple[str, int]] = []
    executor = InProcessExecutor({D: _settings_decode(settings), V: lambda: Seen([]), E: lambda: Embedded(embedded)})
    scheduler = Scheduler(executor, [D, V, E], window=2, timeout=60)
    item = DecodeStage(settings).process(str(media(CLIPS[0])))
    item.segments = [Segment(item.video_id, item.source, 0.0, 1.0, "speech", "indexed before")]
    route = FULL_ROUTE.only([D, V, E]).from_then(E)
    assert route == Route((), (E,))
    scheduler.add(Plan(item.source, Outcome.NEEDS_SUMMARY, video_id=item.video_id), route, lambda: item)
    assert list(_run(scheduler, executor).values())[0] is item
    assert embedded == [("jfk.flac", 1)]


def test_a_stage_without_workers_is_a_clear_stall(settings: Settings) -> None:
    executor = InProcessExecutor({D: _settings_decode(settings), E: lambda: Embedded([])}, workers={E: 0})
    scheduler = Scheduler(executor, [D, E], window=2, timeout=60)
    clip = media(CLIPS[0])
    scheduler.add(Plan(str(clip), Outcome.NEW), FULL_ROUTE.only([D, E]), lambda: str(clip))
    with pytest.raises(IngestStalled, match="no worker of the embed stage"):
        _run(scheduler, executor)


def test_a_first_input_that_cannot_be_read_fails_that_file_only(settings: Settings) -> None:
    executor = InProcessExecutor({D: _settings_decode(settings), E: lambda: Embedded([])})
    scheduler = Scheduler(executor, [D, E], window=2, timeout=60)

    def gone() -> MediaItem:
        raise KeyError("video abc is no longer in the index")

    scheduler.add(Plan("/gone.mp4", Outcome.NEEDS_SUMMARY, video_id="abc"), Route((), (E,)), gone)
    clip = media(CLIPS[0])
    scheduler.add(Plan(str(clip), Outcome.NEW), FULL_ROUTE.only([D, E]), lambda: str(clip))
    out = _run(scheduler, executor)
    assert "no longer in the index" in out["gone.mp4"] and isinstance(out["jfk.flac"], MediaItem)




class Slow:
    """A stage on the decode branch that takes a while."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process(self, item: MediaItem) -> MediaItem:
        time.sleep(self.seconds)
        return item


def test_a_stage_built_before_it_has_work_does_not_spin_the_loop(settings: Settings) -> None:
    """The embedder is built long before the first file reaches it: each wait still waits for a call to end."""
    from concurrent.futures import Future

    built: Future[Any] = Future()
    built.set_result(Embedded([]))
    executor = InProcessExecutor({D: _settings_decode(settings), V: lambda: Slow(1.5), E: lambda: Embedded([])},
                                 loading={E: [built]})
    scheduler = Scheduler(executor, [D, V, E], window=2, timeout=60)
    clip = media(CLIPS[0])
    scheduler.add(Plan(str(clip), Outcome.NEW), FULL_ROUTE.only([D, V, E]), lambda: str(clip))
    steps = 0
    deadline = time.monotonic() + 30
    while not scheduler.done:
        assert time.monotonic() < deadline, "the scheduler did not finish"
        scheduler.step()
        steps += 1
    # 1.5 s in the slow stage at 0.5 s a wait: a handful of steps, not thousands.
    assert steps < 20, f"{steps} steps"


def test_the_in_process_pipeline_caps_malloc_arenas_unless_the_user_set_them() -> None:
    code = "from mediaindex.pipeline.inprocess import limit_malloc_arenas; print(limit_malloc_arenas())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    capped = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    kept = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "MALLOC_ARENA_MAX": "4"},
                          capture_output=True, text=True, check=True)
    assert (capped.stdout.strip(), kept.stdout.strip()) == (str(sys.platform.startswith("linux")), "False")
