"""The one call into the searcher: the same entry point as `mediaindex search` and the HTTP API's /search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediaindex.index.filters import SearchFilters

if TYPE_CHECKING:
    from mediaindex.mcp.host import ArchiveHost
    from mediaindex.segments import Hit


def search(host: ArchiveHost, query: str, limit: int, filters: SearchFilters,
           min_confidence: str | None = None) -> list[Hit]:
    """Moments for `query`, best first, at least as probably relevant as `min_confidence` asks (default low)."""
    return host.archive.search(query, limit=limit, filters=filters, min_confidence=min_confidence)
