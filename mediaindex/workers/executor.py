"""The ingest scheduler's executor on Ray (`mediaindex.pipeline.executor.Executor`): one idle actor per call.

Results stay in Ray's object store: a call's result is its ObjectRef, handed on as the next call's argument,
so audio and frames never pass the driver. A call whose actor died is re-run by Ray on the restarted actor
(`max_task_retries`), and a call whose input failed fails alike without running.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mediaindex.errors import StageError, reason_of
from mediaindex.pipeline.stages.registry import StageName

PROGRESS_WAIT = 0.2  # seconds: a busy actor's progress thread answers in milliseconds


@dataclass(eq=False)
class RayCall:
    stage: StageName
    result: Any  # ray.ObjectRef
    actor: Any
    started: float = field(default_factory=time.monotonic)


class RayExecutor:
    def __init__(self, actors: Mapping[StageName, list[Any]], retries: int) -> None:
        self.idle_actors = {stage: list(handles) for stage, handles in actors.items()}
        self.retries = retries

    def idle(self, stage: StageName) -> bool:
        return bool(self.idle_actors[stage])

    def starting(self) -> bool:
        return False  # the pipeline's actors were ready before it was handed out

    def submit(self, stage: StageName, inputs: Sequence[Any]) -> RayCall:
        actor = self.idle_actors[stage].pop()
        return RayCall(stage, actor.process.remote(*inputs), actor)

    def wait(self, tasks: Collection[RayCall], timeout: float) -> list[RayCall]:
        import ray

        by_ref = {t.result: t for t in tasks}
        refs = list(by_ref)
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=False)
        if ready and rest:  # everything else that is already done too
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)
            ready += more
        for ref in ready:
            self.idle_actors[by_ref[ref].stage].append(by_ref[ref].actor)
        return [by_ref[ref] for ref in ready]

    def progress(self, tasks: Collection[RayCall]) -> dict[RayCall, float]:
        import ray

        by_ref = {t.actor.progress.remote(): t for t in tasks}
        ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=PROGRESS_WAIT) if by_ref else ([], [])
        shares = {}
        for ref in ready:
            try:
                share = ray.get(ref)
            except Exception:  # the actor died or restarts: its call's own result says so
                continue
            if share is not None:
                shares[by_ref[ref]] = share
        return shares

    def cancel(self, task: RayCall) -> None:
        import ray

        ray.cancel(task.result)
        self.idle_actors[task.stage].append(task.actor)  # its next call waits until the cancelled one ends

    def restart(self, task: RayCall) -> None:
        import ray

        # A running call on a synchronous actor cannot be interrupted: the actor is killed and Ray restarts it.
        ray.cancel(task.result)
        ray.kill(task.actor, no_restart=False)
        self.idle_actors[task.stage].append(task.actor)

    def fetch(self, results: Sequence[Any]) -> list[Any]:
        import ray

        try:
            return list(ray.get(list(results)))
        except Exception as exc:
            if _worker_lost(exc):
                raise StageError(f"worker died ({self.retries} retries): {reason_of(exc)}", worker_lost=True) from exc
            raise StageError(reason_of(exc)) from exc


def _worker_lost(exc: BaseException) -> bool:
    """The worker died (crash, OOM kill, killed actor or node): Ray re-ran the call; a stage error is not that."""
    from ray import exceptions as rx

    lost = rx.RayActorError | rx.WorkerCrashedError | rx.ObjectLostError | rx.OutOfMemoryError | rx.NodeDiedError
    # A call whose input was lost fails with a task error that wraps the loss: look through the wrappers.
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, lost):
            return True
        seen = getattr(seen, "cause", None) or seen.__cause__
    return False
