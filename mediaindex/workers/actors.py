"""One actor class for every stage: it builds its stage (and loads the model) once, then processes items."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import ray

from mediaindex.config import Settings
from mediaindex.pipeline.spec import StageSpec
from mediaindex.pipeline.stages.merge import merge

if TYPE_CHECKING:
    from ray.actor import ActorHandle


# Ray restarts a dead stage actor (crash, out-of-memory kill) without limit, and re-runs the call it
# lost at most ingest.max_retries times (start_actor), so a poison file cannot loop forever. Calls sent
# while the actor restarts wait for it instead of failing.
# `progress` runs in a concurrency group of its own (a thread beside the one that processes), so that it answers
# while a call runs; `process` keeps the default group, one call at a time.
@ray.remote(max_restarts=-1, concurrency_groups={"progress": 1})
class StageActor:
    def __init__(self, spec: StageSpec, settings: Settings) -> None:
        self.name = spec.name
        if spec.nice:
            os.nice(spec.nice)  # before the model loads: the threads it starts inherit the priority
        began = time.monotonic()
        self.stage = spec.build(settings)
        self.built_in = time.monotonic() - began  # seconds its models took to load

    def process(self, *inputs: Any) -> Any:
        # Several inputs are the results of a route's branches: they merge into one item here, where they are.
        return self.stage.process(merge(inputs) if len(inputs) > 1 else inputs[0])

    @ray.method(concurrency_group="progress")
    def progress(self) -> float | None:
        """The share of the call in hand done, where the stage can tell (`StageContract`)."""
        read = getattr(self.stage, "progress", None)
        return read() if read is not None else None

    def ready(self) -> tuple[str, float]:
        """The stage's name and the seconds its build (model loads) took in this actor."""
        return self.name, self.built_in

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def start_actor(spec: StageSpec, settings: Settings) -> ActorHandle[StageActor]:
    # mypy does not apply a class decorator's result: StageActor is Ray's ActorClass at run time.
    return StageActor.options(  # type: ignore[attr-defined]
        num_cpus=spec.cpus, num_gpus=spec.gpus, max_task_retries=settings.ingest.max_retries,
    ).remote(spec, settings)
