"""Stages run on threads of this process: the executor unit tests drive, and a pipeline without Ray.

Each stage has `workers` instances, built once; a call runs on its own thread. A worker whose stage raises
`WorkerLostError` counts as dead: it is rebuilt and the call re-run, `retries` times, as Ray re-runs a call
lost with its actor. A restarted worker (a call over the timeout) is replaced by a fresh one at once; the old
call's thread is left to finish and its result dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from mediaindex.config import Settings
from mediaindex.errors import StageError, WorkerLostError, reason_of
from mediaindex.ingest.executor import Call
from mediaindex.stages.merge import merge
from mediaindex.stages.registry import StageName
from mediaindex.workers.stages import StageSpec, default_stages


class _Box:
    """A result: its value or its error, once the call finished."""

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.error: StageError | None = None


class InProcessExecutor:
    def __init__(self, factories: Mapping[StageName, Callable[[], Any]], workers: Mapping[StageName, int] | None = None,
                 retries: int = 0, built: Mapping[StageName, list[Any]] | None = None) -> None:
        """`workers` per stage (default 1) are built from `factories`, unless `built` holds them already."""
        self.factories, self.retries = dict(factories), retries
        self.idle_workers = {s: list((built or {}).get(s) or [make() for _ in range((workers or {}).get(s, 1))])
                             for s, make in factories.items()}
        self.changed = threading.Condition()
        self.dropped: set[int] = set()  # ids of calls cancelled or restarted: their workers do not come back

    def idle(self, stage: StageName) -> bool:
        return bool(self.idle_workers[stage])

    def submit(self, stage: StageName, inputs: Sequence[Any]) -> Call:
        task = Call(stage, _Box(), worker=self.idle_workers[stage].pop())
        threading.Thread(target=self._run, args=(task, list(inputs)), daemon=True,
                         name=f"stage-{stage.value}").start()
        return task

    def _run(self, task: Call, inputs: list[Any]) -> None:
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
        with self.changed:
            self.changed.wait_for(lambda: any(t.result.done for t in tasks), timeout=timeout)
            return [t for t in tasks if t.result.done]

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


def _builder(spec: StageSpec, settings: Settings) -> Callable[[], Any]:
    return lambda: spec.build(settings)


class InProcessPipeline:
    """The pipeline's stages built once in this process (no Ray): for small jobs and tests."""

    def __init__(self, settings: Settings, stages: list[StageSpec] | None = None) -> None:
        self.settings = settings
        self.stages = stages or default_stages(settings)
        self.factories: dict[StageName, Callable[[], Any]] = {
            spec.name: _builder(spec, settings) for spec in self.stages}
        self.built = {spec.name: [self.factories[spec.name]() for _ in range(spec.workers)] for spec in self.stages}

    def executor(self) -> InProcessExecutor:
        return InProcessExecutor(self.factories, retries=self.settings.ingest.max_retries, built=self.built)

    def close(self) -> None:
        self.built.clear()
