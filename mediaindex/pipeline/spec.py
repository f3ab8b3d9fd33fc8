"""The stages of a pipeline and the Ray resources of each stage's actor pool (`ray.stages.<name>`)."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.pipeline.stages.registry import STAGES, StageName

__all__ = ["StageName", "StageSpec", "StageStartError", "default_stages"]


class StageStartError(MediaIndexError):
    """A stage could not start (e.g. its model does not load)."""


@dataclass(frozen=True)
class StageSpec:
    name: StageName
    factory: str = ""  # "package.module:Class"; "" = the registry's class for the name
    workers: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    threads: int = 0  # 0 = the stage's own thread setting, or the CPUs reserved rounded up
    nice: int = 0  # added to its actors' niceness

    @classmethod
    def from_settings(cls, name: StageName, settings: Settings, factory: str = "") -> StageSpec:
        stage = STAGES[name]
        res = stage.resources(settings)
        gpus = 0.0 if stage.on_cpu(settings) else res.gpus
        return cls(name, factory, res.workers, res.cpus, gpus, res.threads, res.nice)

    @property
    def settings_key(self) -> str:
        return f"ray.stages.{self.name.value}"

    def build(self, settings: Settings) -> Any:
        """The stage, built with its sized settings: its registered class, or `factory` ("module:Class")."""
        if not self.factory:
            return STAGES[self.name].stage(self.sized(settings))
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)(self.sized(settings))

    def sized(self, settings: Settings) -> Settings:
        """The settings with this stage's thread count: `threads` if set, else its own setting if set,
        else (for stages that size automatically) the CPUs its actor reserves, rounded up."""
        stage = STAGES[self.name]
        if stage.threads is None or stage.with_threads is None:
            return settings
        own = stage.threads(settings)
        threads = self.threads or own
        if not threads and stage.auto_threads:
            threads = max(1, math.ceil(self.cpus))
        return settings if threads == own else stage.with_threads(settings, threads)


def default_stages(settings: Settings) -> list[StageSpec]:
    """The stages of a pipeline for `settings`: vision when it is enabled, summary with ingest.summaries."""
    names = [StageName.DECODE, StageName.SPEECH]
    if settings.vision.enabled:
        names.append(StageName.VISION)
    if settings.ingest.summaries:
        names.append(StageName.SUMMARY)
    names.append(StageName.EMBED)
    return [StageSpec.from_settings(name, settings) for name in names]
