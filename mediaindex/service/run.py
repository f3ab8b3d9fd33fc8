"""The ingest the service runs: where a job's stages run, picked once per run.

A small job runs on threads of this process, any other on Ray's actor pools (`mediaindex.workers`). The pipeline
itself (`mediaindex.pipeline`) knows only the `Executor` protocol.
"""

from __future__ import annotations

import logging
import time

from mediaindex.config import Settings
from mediaindex.index.index import MediaIndex
from mediaindex.pipeline.plan import Plan
from mediaindex.pipeline.run import (
    IngestHooks,
    IngestReport,
    IngestRequest,
    StagePipeline,
    start_in_process,
)
from mediaindex.pipeline.run import ingest as run_ingest
from mediaindex.pipeline.small import in_process
from mediaindex.workers.pool import Pipeline

log = logging.getLogger(__name__)


def start_pipeline(settings: Settings, todo: list[Plan]) -> StagePipeline:
    """The stages for a run over `todo`: in this process for a small job (`ingest.in_process_*`), else on Ray."""
    choice = in_process(settings, todo)
    if choice.local:
        return start_in_process(settings, todo, choice.why)
    log.info("ingest: %s: the stages run on Ray", choice.why)
    began = time.monotonic()
    pipeline = Pipeline(settings)
    log.info("ingest: Ray pipeline ready in %.1f s", time.monotonic() - began)
    return pipeline


def ingest(request: IngestRequest, index: MediaIndex, pipeline: StagePipeline | None = None,
           hooks: IngestHooks | None = None) -> IngestReport:
    """`mediaindex.pipeline.run.ingest`, its pipeline (when none is given) started by `start_pipeline`."""
    return run_ingest(request, index, pipeline, hooks, start=start_pipeline)
