"""Reading one video's segments for the API."""

from __future__ import annotations

from mediaindex.index.store import hit_from_payload
from mediaindex.segments import Hit


def video_segments(store, video_id: str, modality: str | None = None) -> list[Hit]:
    """Every segment of one video, in time order."""
    return [hit_from_payload(p, 0.0) for p in store.segments_of(video_id, modality)]
