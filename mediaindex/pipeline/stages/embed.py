"""The last stage before the index: a text vector for every segment (the embedding of its text; for a picture
without words, its place among its likely classes, `models.label_space`)."""

from __future__ import annotations

from mediaindex.config import Settings
from mediaindex.models.label_space import LabelSpace, segment_vectors
from mediaindex.pipeline.stages.contract import StageContract, StageName
from mediaindex.pipeline.stages.item import MediaItem


class EmbedStage:
    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.text_embed import load_text_embedder

        self.embedder = load_text_embedder(settings.embed, settings.cache_dir)
        self.label_space = LabelSpace(self.embedder, settings.cache_dir)
        # The first call sets the engine up (a second or so): paid here, with the load, not by the first file.
        self.embedder.embed_passages(["warm-up"])

    def process(self, item: MediaItem) -> MediaItem:
        item.keyframes = [k.without_pixels() for k in item.keyframes]
        item.vectors = segment_vectors(self.embedder, item.segments, self.label_space)
        return item

STAGE = StageContract(
    StageName.EMBED, EmbedStage, resources=lambda s: s.ray.stages.embed, on_cpu=lambda s: s.embed.device == "cpu")
