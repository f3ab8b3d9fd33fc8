"""Natural-language search: embed the query, find the nearest segments, return moments."""

from __future__ import annotations

from mediaindex.index.index import MediaIndex
from mediaindex.index.store import SearchFilters
from mediaindex.models.text_embed import TextEmbedder
from mediaindex.segments import Hit


def search(
    index: MediaIndex,
    embedder: TextEmbedder,
    query: str,
    limit: int = 10,
    filters: SearchFilters | None = None,
) -> list[Hit]:
    query = query.strip()
    if not query:
        raise ValueError("the search query is empty")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return index.store.search(embedder.embed_query(query), limit=limit, filters=filters)
