"""The stage registry: every ingestion stage by name, with what the pipeline needs to know about it.

A stage is a plain class built as ``Class(settings)`` whose ``process(x)`` returns the next stage's input:
decode and speech take a file path, every later one a MediaItem. Adding a stage is one `StageName`, one
entry here and its `ray.stages.<name>` defaults in `mediaindex.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mediaindex.config import STAGE_NAMES


class StageName(StrEnum):
    DECODE = "decode"
    SPEECH = "speech"
    VISION = "vision"
    SUMMARY = "summary"  # summaries and chapters by the language model (ingest.summaries)
    EMBED = "embed"


assert tuple(StageName) == STAGE_NAMES, "config.STAGE_NAMES and StageName must name the same stages"


@dataclass(frozen=True)
class StageInfo:
    factory: str  # "package.module:Class", imported where the stage runs, so a driver loads no model
    section: str  # the settings section of its models: its `device` decides whether it reserves a GPU share
    threads: str  # the setting in that section holding its CPU threads ("" = none)
    # Left at 0 everywhere, its threads are the CPUs its actor reserves (stages sharing cores then do not
    # fight over them); the language model keeps its own default instead (every core).
    auto_threads: bool = True


STAGES: dict[StageName, StageInfo] = {
    StageName.DECODE: StageInfo("mediaindex.pipeline.stages.decode:DecodeStage", "frames", "decode_threads"),
    StageName.SPEECH: StageInfo("mediaindex.pipeline.stages.speech:SpeechStage", "speech", "cpu_threads"),
    StageName.VISION: StageInfo("mediaindex.pipeline.stages.vision:VisionStage", "vision", "threads"),
    StageName.SUMMARY: StageInfo("mediaindex.pipeline.stages.summary:SummaryStage", "llm", "cpu_threads", False),
    StageName.EMBED: StageInfo("mediaindex.pipeline.stages.embed:EmbedStage", "embed", ""),
}
