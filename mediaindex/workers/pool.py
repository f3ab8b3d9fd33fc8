"""The stage actor pools of the ingestion pipeline, started once and reused across ingest runs."""

from __future__ import annotations

import logging

import mediaindex.workers  # noqa: F401  (sets Ray's auth environment before Ray is imported)
from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.workers.stages import StageSpec, default_stages

log = logging.getLogger(__name__)


class StageStartError(MediaIndexError):
    """A stage's actors could not start (e.g. its model does not load)."""


class Pipeline:
    """One ``ray.util.ActorPool`` per stage, in order. ``actors[name]`` are the handles of a stage."""

    def __init__(self, settings: Settings, stages: list[StageSpec] | None = None) -> None:
        import ray
        from ray.util import ActorPool

        from mediaindex.workers.actors import start_actor
        from mediaindex.workers.runtime import ensure_ray

        ensure_ray(settings)
        self.settings = settings
        self.stages = stages or default_stages(settings)
        have = ray.cluster_resources()
        for spec in self.stages:
            for kind, need in (("GPU", spec.gpus), ("CPU", spec.cpus)):
                if need > have.get(kind, 0):
                    raise StageStartError(f"the {spec.name} stage asks for {need:g} {kind} per actor but the Ray "
                                          f"cluster has {have.get(kind, 0):g}: lower ray.{spec.name}_{kind.lower()}s")
        self.actors = {s.name: [start_actor(s, settings) for _ in range(s.workers)] for s in self.stages}
        self.pools = [ActorPool(list(self.actors[s.name])) for s in self.stages]
        # Load every model now: a stage that cannot start is one clear error, not a failure per file.
        for spec in self.stages:
            try:
                ray.get([a.ready.remote() for a in self.actors[spec.name]])
            except Exception as exc:
                self.close()
                cause = getattr(exc, "cause", None) or exc
                raise StageStartError(f"the {spec.name} stage could not start: {cause}") from exc
        log.info("pipeline: %s", ", ".join(f"{s.name}×{s.workers} ({s.cpus:g} CPU, {s.gpus:g} GPU)"
                                           for s in self.stages))

    def close(self) -> None:
        import ray

        for handles in self.actors.values():
            for actor in handles:
                ray.kill(actor)
