"""What every ingestion stage declares about itself, beside its class: its name, where its settings live,
its actor pool's resources and its CPU threads. The registry (`registry.py`) is built from these
declarations; nothing else names a stage's settings.

A stage is a plain class built as ``Class(settings)`` whose ``process(x)`` returns the next stage's input:
decode and speech take a file path, every later one a MediaItem. A stage whose calls run long on a long file
also offers ``progress()``: the share (0 to 1) of the call in hand done, or None; it is read from another thread
while the call runs, for the ingest's progress display.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mediaindex.config import Settings, StageResources


class StageName(StrEnum):
    DECODE = "decode"
    SPEECH = "speech"
    VISION = "vision"
    SUMMARY = "summary"  # summaries and chapters by the language model (ingest.summaries)
    EMBED = "embed"


@dataclass(frozen=True)
class StageContract:
    name: StageName
    stage: type[Any]  # built as stage(settings) where the stage runs
    resources: Callable[[Settings], StageResources]  # its `ray.stages.<name>` share
    # Its models run on the CPU (then it reserves no GPU share, whatever the profile says).
    on_cpu: Callable[[Settings], bool]
    # Its own CPU-thread setting, and the settings with that setting changed (None: it has none).
    threads: Callable[[Settings], int] | None = None
    with_threads: Callable[[Settings, int], Settings] | None = None
    # Left at 0 everywhere, its threads are the CPUs its actor reserves (stages sharing cores then do not
    # fight over them); the language model keeps its own default instead (every core).
    auto_threads: bool = True
