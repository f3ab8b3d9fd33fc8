"""The one call into the searcher: the same entry point as `mediaindex search` and the HTTP API's /search."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from mediaindex.errors import MediaIndexError
from mediaindex.index.filters import SearchFilters

if TYPE_CHECKING:
    from mediaindex.mcp.host import ArchiveHost
    from mediaindex.segments import Hit


def search(host: ArchiveHost, query: str, limit: int, filters: SearchFilters,
           min_confidence: str | None = None) -> list[Hit]:
    """Moments for `query`, best first. `min_confidence` is passed on only to a searcher that takes it."""
    from mediaindex.index.search import Searcher

    searcher = Searcher(host.index, host.embedder, host.settings.vision)
    options: dict[str, Any] = {}
    if min_confidence is not None:
        if "min_confidence" not in inspect.signature(searcher.text).parameters:
            raise MediaIndexError("this server's search does not take min_confidence: leave it out")
        options["min_confidence"] = min_confidence
    return searcher.text(query, limit=limit, filters=filters, **options)
