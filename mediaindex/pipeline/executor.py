"""What the scheduler needs from whatever runs the stages: an `Executor`.

`mediaindex.workers.executor.RayExecutor` runs each stage in a pool of Ray actors; `InProcessExecutor`
(`mediaindex.pipeline.inprocess`) runs stage objects on threads of this process, for unit tests and small jobs.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mediaindex.pipeline.stages.registry import StageName


class Task(Protocol):
    """One stage call on one file's input, as the scheduler sees it (each executor has its own class)."""

    stage: StageName
    result: Any  # the handle later stages take as their input and `Executor.fetch` resolves
    started: float  # time.monotonic() when it was submitted


@dataclass(eq=False)
class Call:
    """A plain `Task`, with the worker that runs it."""

    stage: StageName
    result: Any
    worker: Any = None
    started: float = field(default_factory=time.monotonic)


TaskT = TypeVar("TaskT", bound=Task)


class Executor(Protocol[TaskT]):
    """Each executor takes back only the tasks it made (its own `Task` class)."""

    def idle(self, stage: StageName) -> bool:
        """A worker of `stage` is free for a call. Raises `StageStartError` when a worker could not be built."""

    def starting(self) -> bool:
        """Workers are still being built (their models load): files that wait for them are not stalled, and
        `wait` returns when one is ready."""

    def submit(self, stage: StageName, inputs: Sequence[Any]) -> TaskT:
        """Start `stage` on an idle worker. Inputs are plain values (a path, an item) or earlier tasks' results;
        more than one are merged (`mediaindex.pipeline.stages.merge`) first. An input that failed fails the task alike.
        A call whose worker dies is re-run on the restarted worker, ingest.max_retries times."""

    def wait(self, tasks: Collection[TaskT], timeout: float) -> list[TaskT]:
        """The tasks among `tasks` that have finished (with a result or an error), waiting up to `timeout`
        seconds for the first."""

    def progress(self, tasks: Collection[TaskT]) -> dict[TaskT, float]:
        """How far each running task whose stage can tell (`progress()`) has got, as a share of its call; waits
        at most a moment: a task that does not answer at once is left out."""

    def cancel(self, task: TaskT) -> None:
        """Forget a task (its file failed or the run stops); its worker is free again."""

    def restart(self, task: TaskT) -> None:
        """The task ran too long: stop its worker, which comes back fresh; the task is forgotten."""

    def fetch(self, results: Sequence[Any]) -> list[Any]:
        """The values of results; raises `StageError` when a stage failed on them."""
