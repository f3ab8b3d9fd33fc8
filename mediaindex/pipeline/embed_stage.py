"""The last stage before the index: embed every segment's text."""

from __future__ import annotations

import numpy as np

from mediaindex.config import Settings
from mediaindex.pipeline.item import Keyframe, MediaItem


class EmbedStage:
    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.text_embed import load_text_embedder

        self.embedder = load_text_embedder(settings.embed)

    def process(self, item: MediaItem) -> MediaItem:
        item.keyframes = [Keyframe(k.time, k.end, np.empty((0, 0, 3), np.uint8), k.thumbnail) for k in item.keyframes]
        item.vectors = self.embedder.embed_passages([s.text for s in item.segments])
        return item
