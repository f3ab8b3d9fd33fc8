"""The stages of a pipeline and the Ray resources of each stage's actor pool (`ray.stages.<name>`)."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

from mediaindex.config import Settings, StageResources
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
        res: StageResources = getattr(settings.ray.stages, name.value)
        gpus = res.gpus
        # A stage whose models run on the CPU reserves no GPU share, whatever the profile says.
        if getattr(getattr(settings, STAGES[name].section, None), "device", None) == "cpu":
            gpus = 0.0
        return cls(name, factory, res.workers, res.cpus, gpus, res.threads, res.nice)

    @property
    def settings_key(self) -> str:
        return f"ray.stages.{self.name.value}"

    def build(self, settings: Settings) -> Any:
        module, _, attr = (self.factory or STAGES[self.name].factory).partition(":")
        return getattr(importlib.import_module(module), attr)(self.sized(settings))

    def sized(self, settings: Settings) -> Settings:
        """The settings with this stage's thread count: `threads` if set, else its own setting if set,
        else (for stages that size automatically) the CPUs its actor reserves, rounded up."""
        info = STAGES[self.name]
        if not info.threads:
            return settings
        part = getattr(settings, info.section)
        threads = self.threads or getattr(part, info.threads)
        if not threads and info.auto_threads:
            threads = max(1, math.ceil(self.cpus))
        if threads == getattr(part, info.threads):
            return settings
        return settings.model_copy(update={info.section: part.model_copy(update={info.threads: threads})})


def default_stages(settings: Settings) -> list[StageSpec]:
    """The stages of a pipeline for `settings`: vision when it is enabled, summary with ingest.summaries."""
    names = [StageName.DECODE, StageName.SPEECH]
    if settings.vision.enabled:
        names.append(StageName.VISION)
    if settings.ingest.summaries:
        names.append(StageName.SUMMARY)
    names.append(StageName.EMBED)
    return [StageSpec.from_settings(name, settings) for name in names]
