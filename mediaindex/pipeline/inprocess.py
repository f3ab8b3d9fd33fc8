"""Stages run on threads of this process: the executor unit tests drive, and the pipeline of small jobs (no Ray).

Each stage has `workers` instances; a call runs on its own thread. A worker whose stage raises
`WorkerLostError` counts as dead: it is rebuilt and the call re-run, `retries` times, as Ray re-runs a call
lost with its actor. A restarted worker (a call over the timeout) is replaced by a fresh one at once; the old
call's thread is left to finish and its result dropped.

`InProcessPipeline` builds its stages (loads their models) on threads of their own, all at once, and hands
out an executor straight away: the decode and the transcription of the first file start while the vision
models and the embedder are still loading, and a stage is dispatched to as soon as its first worker is built.
A stage that cannot be built stops the run with `StageStartError`, as a Ray pipeline's start does. Each call
and each build runs at the stage's `nice` above this process's priority (Linux sets it per thread), as the
stage's Ray actors do, so that the stages with spare capacity yield the cores to the slowest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from mediaindex.config import Settings
from mediaindex.errors import StageError, WorkerLostError, reason_of
from mediaindex.pipeline.executor import Call
from mediaindex.pipeline.spec import StageSpec, StageStartError, default_stages
from mediaindex.pipeline.stages.merge import merge
from mediaindex.pipeline.stages.registry import StageName

log = logging.getLogger(__name__)


class _Box:
    """A result: its value or its error, once the call finished."""

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.error: StageError | None = None


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the operating system (`top -H`, /proc/PID/task/*/comm: 15 bytes on
    Linux; elsewhere nothing is done). Threads a model's runtime starts from it (ONNX Runtime's and OpenMP's
    pools) are created with the same name, so a stage's CPU can be told from the others'."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


# glibc's malloc gives threads arenas of their own, up to 8 per core; every stage call runs on a thread of its own
# and the models' pools add more, so a run's freed memory lies spread over many arenas, none given back while
# another part of it is in use, and the peak grows. Two arenas keep it lower at no clear cost in CPU. glibc fixes
# the limit once more than 8 arenas exist: the cap must come before the process's threads (`mediaindex ingest`
# sets it first thing).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for the threads started from now on, unless MALLOC_ARENA_MAX is set (the
    user's choice, read by glibc itself); True if the cap was set. Nothing is done off glibc."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def lower_thread_priority(nice: int) -> None:
    """Add `nice` to the calling thread's niceness (Linux keeps one per thread; elsewhere nothing is done).
    Threads a model starts from this thread inherit it."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


class InProcessExecutor:
    def __init__(self, factories: Mapping[StageName, Callable[[], Any]], workers: Mapping[StageName, int] | None = None,
                 retries: int = 0, built: Mapping[StageName, list[Any]] | None = None,
                 loading: Mapping[StageName, Sequence[Future[Any]]] | None = None,
                 nice: Mapping[StageName, int] | None = None) -> None:
        """`workers` per stage (default 1) are built from `factories`, unless `built` holds them already or
        `loading` is building them (futures of the workers); `nice` per stage is added to its calls' threads."""
        self.factories, self.retries = dict(factories), retries
        self.nice = dict(nice or {})
        self.changed = threading.Condition()
        self.loading: dict[StageName, list[Future[Any]]] = {s: list(f) for s, f in (loading or {}).items() if f}
        self.idle_workers = {
            s: list((built or {}).get(s) or ([] if s in self.loading else
                                             [make() for _ in range((workers or {}).get(s, 1))]))
            for s, make in factories.items()}
        for futures in self.loading.values():
            for future in futures:
                future.add_done_callback(self._built)
        self.dropped: set[int] = set()  # ids of calls cancelled or restarted: their workers do not come back

    def _built(self, future: Future[Any]) -> None:
        with self.changed:
            self.changed.notify_all()

    def _take_built(self, stage: StageName) -> None:
        """Workers of `stage` whose build finished join its idle ones; a build that failed stops the run."""
        futures = self.loading.get(stage)
        if not futures:
            return
        for future in [f for f in futures if f.done()]:
            futures.remove(future)
            error = future.exception()
            if error is not None:
                self.loading.clear()
                raise StageStartError(f"the {stage.value} stage could not start: {reason_of(error)}") from error
            self.idle_workers[stage].append(future.result())

    def starting(self) -> bool:
        """Workers are still being built: files waiting for them are not stalled."""
        return any(self.loading.values())

    def idle(self, stage: StageName) -> bool:
        self._take_built(stage)
        return bool(self.idle_workers[stage])

    def submit(self, stage: StageName, inputs: Sequence[Any]) -> Call:
        task = Call(stage, _Box(), worker=self.idle_workers[stage].pop())
        threading.Thread(target=self._run, args=(task, list(inputs)), daemon=True,
                         name=f"stage-{stage.value}").start()
        return task

    def _run(self, task: Call, inputs: list[Any]) -> None:
        name_os_thread(f"mi-{task.stage.value}")
        lower_thread_priority(self.nice.get(task.stage, 0))
        box: _Box = task.result
        worker = task.worker
        try:
            failed = next((i.error for i in inputs if isinstance(i, _Box) and i.error), None)
            if failed is not None:  # an input failed: this call fails alike, without running
                raise failed
            values = [i.value if isinstance(i, _Box) else i for i in inputs]
            x = merge(values) if len(values) > 1 else values[0]
            for tries in range(self.retries + 1):
                try:
                    box.value = worker.process(x)
                    break
                except WorkerLostError as exc:
                    worker = self.factories[task.stage]()  # the dead worker's replacement
                    if tries == self.retries:
                        raise StageError(f"worker died ({self.retries} retries): {reason_of(exc)}",
                                         worker_lost=True) from exc
        except StageError as exc:
            box.error = exc
        except Exception as exc:
            box.error = StageError(reason_of(exc))
        with self.changed:
            box.done = True
            if id(task) not in self.dropped:
                self.idle_workers[task.stage].append(worker)
            self.changed.notify_all()

    def wait(self, tasks: Collection[Call], timeout: float) -> list[Call]:
        """Also returns (with nothing) as soon as a worker being built is ready for a call."""
        # Workers built before this wait join their stage first: left among the builds, a stage built before
        # it has work (the embedder, while the first file is transcribed) would end every wait at once, and
        # the scheduler's loop would spin.
        for stage in list(self.loading):
            self._take_built(stage)

        def ready() -> bool:
            return any(t.result.done for t in tasks) or any(f.done() for fs in self.loading.values() for f in fs)

        with self.changed:
            self.changed.wait_for(ready, timeout=timeout)
            return [t for t in tasks if t.result.done]

    def progress(self, tasks: Collection[Call]) -> dict[Call, float]:
        shares = {}
        for task in tasks:
            read = getattr(task.worker, "progress", None)
            share = read() if read is not None and not task.result.done else None
            if share is not None:
                shares[task] = share
        return shares

    def cancel(self, task: Call) -> None:
        # A thread cannot be stopped: the worker comes back when its call ends, and nothing waits for it.
        pass

    def restart(self, task: Call) -> None:
        with self.changed:
            if task.result.done:
                return
            self.dropped.add(id(task))
            self.idle_workers[task.stage].append(self.factories[task.stage]())

    def fetch(self, results: Sequence[Any]) -> list[Any]:
        for box in results:
            if box.error is not None:
                raise box.error
        return [box.value for box in results]


class InProcessPipeline:
    """The pipeline's stages built in this process (no Ray), each worker on a thread of its own, all at once.

    `wait=True` returns once every stage is built (or raises `StageStartError`); by default the executor is
    handed out at once and each stage takes calls as soon as its first worker is built. `built_in[name]`
    holds the seconds each stage took to build (load its models), once it is built."""

    def __init__(self, settings: Settings, stages: list[StageSpec] | None = None, wait: bool = False) -> None:
        self.settings = settings
        self.stages = stages or default_stages(settings)
        limit_malloc_arenas()  # before the stages' threads start (too late if 8 arenas exist already)
        self.started = time.monotonic()
        self.built_in: dict[StageName, float] = {}
        self.factories: dict[StageName, Callable[[], Any]] = {spec.name: _builder(spec, settings)
                                                              for spec in self.stages}
        self.workers: dict[StageName, list[Future[Any]]] = {spec.name: [] for spec in self.stages}
        for spec in self.stages:
            for n in range(spec.workers):
                future: Future[Any] = Future()
                self.workers[spec.name].append(future)
                threading.Thread(target=self._build, args=(spec, future), daemon=True,
                                 name=f"build-{spec.name.value}-{n}").start()
        if wait:
            for spec in self.stages:
                for future in self.workers[spec.name]:
                    error = future.exception()
                    if error is not None:
                        raise StageStartError(f"the {spec.name.value} stage could not start: {reason_of(error)}") \
                            from error

    def _build(self, spec: StageSpec, future: Future[Any]) -> None:
        name_os_thread(f"mi-{spec.name.value}")
        lower_thread_priority(spec.nice)  # threads its model starts inherit the stage's priority
        began = time.monotonic()
        try:
            worker = self.factories[spec.name]()
        except BaseException as exc:
            log.info("stage %s: could not start after %.1f s: %s", spec.name.value, time.monotonic() - began,
                     reason_of(exc))
            future.set_exception(exc)
            return
        seconds = time.monotonic() - began
        self.built_in[spec.name] = max(self.built_in.get(spec.name, 0.0), seconds)
        log.info("stage %s: built in this process in %.1f s (ready %.1f s after the pipeline started)",
                 spec.name.value, seconds, time.monotonic() - self.started)
        future.set_result(worker)

    def executor(self) -> InProcessExecutor:
        built = {s: [f.result() for f in fs] for s, fs in self.workers.items()
                 if fs and all(f.done() and f.exception() is None for f in fs)}
        loading = {s: fs for s, fs in self.workers.items() if s not in built}
        return InProcessExecutor(self.factories, retries=self.settings.ingest.max_retries, built=built,
                                 loading=loading, nice={spec.name: spec.nice for spec in self.stages})

    def close(self) -> None:
        self.workers.clear()


def _builder(spec: StageSpec, settings: Settings) -> Callable[[], Any]:
    return lambda: spec.build(settings)
