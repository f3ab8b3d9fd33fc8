"""Where the branches of a file's route meet: one item from the results of stages that ran side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaindex.pipeline.stages.item import MediaItem


def merge(results: Sequence[Any]) -> MediaItem:
    """The decoded item (the one `MediaItem` among the results) with every other branch's result joined into it
    by its `join(item)` (the speech stage's `SpeechResult` adds its transcript)."""
    items = [r for r in results if isinstance(r, MediaItem)]
    if len(items) != 1:
        raise TypeError(f"branch results must hold exactly one MediaItem, not {len(items)}")
    item = items[0]
    for result in results:
        if result is not item:
            item = result.join(item)
    return item
