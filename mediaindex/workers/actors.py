"""One actor class for every stage: it builds its stage (and loads the model) once, then processes items."""

from __future__ import annotations

import os
from typing import Any

import ray

from mediaindex.config import Settings
from mediaindex.workers.stages import StageSpec


# Ray restarts a dead stage actor (crash, out-of-memory kill) without limit; the driver bounds how
# often one *file* is retried (ingest.max_retries), so a poison file cannot loop forever.
@ray.remote(max_restarts=-1, max_task_retries=0)
class StageActor:
    def __init__(self, spec: StageSpec, settings: Settings) -> None:
        self.name = spec.name
        self.stage = spec.build(settings)

    def process(self, item: Any) -> Any:
        return self.stage.process(item)

    def ready(self) -> str:
        return self.name

    def pid(self) -> int:
        return os.getpid()


def start_actor(spec: StageSpec, settings: Settings):  # -> ray.actor.ActorHandle
    return StageActor.options(num_cpus=spec.cpus, num_gpus=spec.gpus).remote(spec, settings)
