"""The ingestion stages in order, and the Ray resources of each stage's actor pool.

A stage is any class built as ``Class(settings)`` whose ``process(x)`` returns the next stage's input:
the first takes a file path, every later one a MediaItem. A stage marked ``from_file`` (speech) runs
beside that line from the start, on the file's path; its result has a ``join(item)`` applied to the item
before the first stage marked ``joins`` (those that read every segment: language, embed), or by the index
writer. Adding a stage is one entry in ``default_stages`` plus its ``<key>_workers/_cpus/_gpus`` fields in
RaySettings, where the key is the stage's name unless its settings section is named otherwise (the language
stage runs the ``llm``).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

from mediaindex.config import Settings
from mediaindex.stages.item import MediaItem

# The setting that holds each stage's CPU threads. Left at 0 (automatic), a stage actor runs as many threads as
# the CPUs it reserves (ray.<stage>_cpus, rounded up), so stages sharing a machine's cores do not fight over
# them (on 2 cores, one thread per stage ingested faster than Whisper and the decoder on both; see
# benchmarks/README.md) and a stage grows by more actors (ray.<stage>_workers) or a larger reservation.
THREAD_SETTINGS = {"decode": ("frames", "decode_threads"), "speech": ("speech", "cpu_threads"),
                   "vision": ("vision", "threads")}


@dataclass(frozen=True)
class StageSpec:
    name: str
    factory: str  # "package.module:Class", imported inside the actor so the driver loads no model
    workers: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    key: str = ""  # settings section and ray.<key>_* resources; "" = the name
    from_file: bool = False  # runs on the file's path beside the other stages (speech needs no decoded pictures)
    joins: bool = False  # gets the results of the from_file stages joined into its item first
    nice: int = 0  # added to its actors' niceness (ray.stage_nice)

    @property
    def settings_key(self) -> str:
        return self.key or self.name

    @classmethod
    def from_settings(cls, name: str, factory: str, settings: Settings, key: str = "", from_file: bool = False,
                      joins: bool = False) -> StageSpec:
        workers, cpus, gpus = settings.ray.stage_resources(key or name)
        # A stage whose models run on the CPU reserves no GPU share, whatever the profile says.
        if getattr(getattr(settings, key or name, None), "device", None) == "cpu":
            gpus = 0.0
        return cls(name, factory, workers, cpus, gpus, key, from_file, joins, settings.ray.stage_nice.get(name, 0))

    def build(self, settings: Settings) -> Any:
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)(self.sized(settings))

    def sized(self, settings: Settings) -> Settings:
        """The settings with this stage's automatic thread count (0) set to the CPUs its actor reserves."""
        section, name = THREAD_SETTINGS.get(self.name, ("", ""))
        if not section or getattr(getattr(settings, section), name):
            return settings
        part = getattr(settings, section)
        return settings.model_copy(update={section: part.model_copy(update={name: max(1, math.ceil(self.cpus))})})


class DecodeStage:
    """Probe, hash and decode one file (the first stage: its input is a path)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def process(self, path: str) -> MediaItem:
        from mediaindex.stages.decode import decode_media

        return decode_media(path, self.settings)


def default_stages(settings: Settings) -> list[StageSpec]:
    stages = [
        ("decode", "mediaindex.workers.stages:DecodeStage", ""),
        ("speech", "mediaindex.stages.speech:SpeechStage", ""),  # from the file, beside decode and vision
    ]
    if settings.vision.enabled:
        stages.append(("vision", "mediaindex.stages.vision:VisionStage", ""))
    if settings.ingest.summaries:
        # After speech and vision (it reads their segments), before embed (its segments are embedded too).
        stages.append(("language", "mediaindex.stages.summary:SummaryStage", "llm"))
    stages.append(("embed", "mediaindex.stages.embed:EmbedStage", ""))
    return [StageSpec.from_settings(name, factory, settings, key, from_file=name == "speech",
                                    joins=name in ("language", "embed"))
            for name, factory, key in stages]
