"""The service under the faces: the `Archive` the CLI, the API and the MCP server call (`service/archive.py`;
through a running server, `service/remote.py`), and the ingest it runs (`service/run.py`: where a job's stages run).

The names below are imported when first asked for: a command that only reads the index does not load the
pipeline's stages (their media libraries take a quarter of a second to import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mediaindex.pipeline.run import (
        FileOutcome,
        IngestHooks,
        IngestReport,
        IngestRequest,
        StagePipeline,
        Status,
        with_choices,
    )
    from mediaindex.service.run import ingest, start_pipeline
    from mediaindex.workers.pool import Pipeline

_FROM = {
    **dict.fromkeys(("FileOutcome", "IngestHooks", "IngestReport", "IngestRequest", "StagePipeline", "Status",
                     "with_choices"), "mediaindex.pipeline.run"),
    "ingest": "mediaindex.service.run", "start_pipeline": "mediaindex.service.run",
    "Pipeline": "mediaindex.workers.pool",
}

__all__ = ["FileOutcome", "IngestHooks", "IngestReport", "IngestRequest", "Pipeline", "StagePipeline", "Status",
           "ingest", "start_pipeline", "with_choices"]


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
