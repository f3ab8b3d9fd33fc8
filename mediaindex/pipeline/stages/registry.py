"""The stage registry: every ingestion stage by name, built from the contract each stage module declares
(`contract.py`). Adding a stage is one `StageName`, its module's `STAGE` and its `ray.stages.<name>` defaults
in `mediaindex.config`."""

from __future__ import annotations

from mediaindex.pipeline.stages import decode, embed, speech, summary, vision
from mediaindex.pipeline.stages.contract import StageContract, StageName

__all__ = ["STAGES", "StageContract", "StageName"]

STAGES: dict[StageName, StageContract] = {m.STAGE.name: m.STAGE for m in (decode, speech, vision, summary, embed)}
