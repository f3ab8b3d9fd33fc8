"""The stage actor pools of the ingestion pipeline, started once and reused across ingest runs."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.config import Settings
from mediaindex.pipeline.spec import StageSpec, StageStartError, default_stages

if TYPE_CHECKING:
    from mediaindex.workers.executor import RayExecutor

log = logging.getLogger(__name__)


class Pipeline:
    """A pool of Ray actors per stage, in order. ``actors[name]`` are the handles of a stage."""

    def __init__(self, settings: Settings, stages: list[StageSpec] | None = None) -> None:
        import ray

        from mediaindex.workers.actors import start_actor
        from mediaindex.workers.runtime import ensure_ray

        began = time.monotonic()
        ensure_ray(settings)
        self.settings = settings
        self.stages = stages or default_stages(settings)
        have = ray.cluster_resources()
        for spec in self.stages:
            for kind, need in (("GPU", spec.gpus), ("CPU", spec.cpus)):
                if need > have.get(kind, 0):
                    raise StageStartError(f"the {spec.name} stage asks for {need:g} {kind} per actor but the Ray "
                                          f"cluster has {have.get(kind, 0):g}: lower {spec.settings_key}.{kind.lower()}s")
        _wait_for_room(self.stages)
        spawned = time.monotonic()
        self.actors = {s.name: [start_actor(s, settings) for _ in range(s.workers)] for s in self.stages}
        # Load every model now: a stage that cannot start is one clear error, not a failure per file.
        self.built_in: dict[str, float] = {}
        ready: dict[Any, StageSpec] = {a.ready.remote(): spec for spec in self.stages for a in self.actors[spec.name]}
        while ready:
            done, _ = ray.wait(list(ready), num_returns=1)
            spec = ready.pop(done[0])
            try:
                _, built = ray.get(done[0])
            except Exception as exc:
                self.close()
                cause = getattr(exc, "cause", None) or exc
                raise StageStartError(f"the {spec.name} stage could not start: {cause}") from exc
            self.built_in[spec.name] = max(self.built_in.get(spec.name, 0.0), built)
            log.info("stage %s: actor ready %.1f s after its spawn (its models loaded in %.1f s)", spec.name,
                     time.monotonic() - spawned, built)
        # The Ray node of each stage's actors: a cluster spreads the stages over its nodes.
        self.nodes: dict[str, list[str]] = {
            s.name: ray.get([a.node_id.remote() for a in self.actors[s.name]]) for s in self.stages}
        count = len({node for ids in self.nodes.values() for node in ids})
        pools = ", ".join(f"{s.name}×{s.workers} ({s.cpus:g} CPU, {s.gpus:g} GPU)" for s in self.stages)
        log.info("pipeline: %s, on %d Ray node%s, ready in %.1f s", pools, count, "" if count == 1 else "s",
                 time.monotonic() - began)

    def executor(self) -> RayExecutor:
        """An executor over these actors for one ingest run."""
        from mediaindex.workers.executor import RayExecutor

        return RayExecutor(self.actors, self.settings.ingest.max_retries)

    def close(self) -> None:
        import ray

        for handles in self.actors.values():
            for actor in handles:
                ray.kill(actor)


def _wait_for_room(stages: list[StageSpec], grace: float = 30.0) -> None:
    """Refuse to start when other actors hold the resources the stages need.

    Ray would otherwise keep the new actors pending forever and the start would hang. Actors of a
    pipeline closed a moment ago release their share asynchronously, hence the short grace period.
    """
    import ray

    need = {"CPU": sum(s.cpus * s.workers for s in stages), "GPU": sum(s.gpus * s.workers for s in stages)}
    deadline = time.monotonic() + grace
    while True:
        free = ray.available_resources()
        short = {k: v for k, v in need.items() if v > free.get(k, 0.0) + 1e-9}
        if not short:
            return
        if time.monotonic() > deadline:
            what = ", ".join(f"{v:g} {k} (free: {free.get(k, 0.0):g})" for k, v in short.items())
            raise StageStartError(f"the pipeline needs {what}, held by other actors in this Ray cluster"
                                  f"{_holders()}: close the other pipeline or raise ray.num_cpus")
        time.sleep(0.5)


def _holders() -> str:
    """The live actors by class, e.g. " (StageActor ×4, LanguageModelActor ×1)", or "" when Ray cannot say."""
    try:  # the public state API needs the dashboard, which a local Ray here runs without
        from ray._private.state import actors

        alive = [a["ActorClassName"] for a in actors().values() if a.get("State") == "ALIVE"]
    except Exception:  # only a detail of an error message
        return ""
    counts: dict[str, int] = {}
    for name in alive:
        counts[name] = counts.get(name, 0) + 1
    return " (" + ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items())) + ")" if counts else ""
