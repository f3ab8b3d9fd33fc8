"""Thin Ray actors around the plain stage classes; each loads its model once."""

from __future__ import annotations

import ray

from mediaindex.config import Settings
from mediaindex.pipeline.decode_stage import decode_media
from mediaindex.pipeline.embed_stage import EmbedStage
from mediaindex.pipeline.item import MediaItem
from mediaindex.pipeline.speech_stage import SpeechStage
from mediaindex.pipeline.vision_stage import VisionStage


@ray.remote(num_cpus=0.5, max_retries=0)
def decode_task(path: str, settings: Settings) -> MediaItem:
    return decode_media(path, settings)


@ray.remote(num_cpus=1, max_restarts=2, max_task_retries=0)
class SpeechActor:
    def __init__(self, settings: Settings) -> None:
        self.stage = SpeechStage(settings)

    def process(self, item: MediaItem) -> MediaItem:
        return self.stage.process(item)


@ray.remote(num_cpus=0.5, max_restarts=2, max_task_retries=0)
class EmbedActor:
    def __init__(self, settings: Settings) -> None:
        self.stage = EmbedStage(settings)

    def process(self, item: MediaItem) -> MediaItem:
        return self.stage.process(item)


@ray.remote(num_cpus=1, max_restarts=2, max_task_retries=0)
class VisionActor:
    """OCR, classifier and (when configured) CLIP; `vision_actor` sets its GPU share from config."""

    def __init__(self, settings: Settings) -> None:
        self.stage = VisionStage(settings)

    def process(self, item: MediaItem) -> MediaItem:
        return self.stage.process(item)


def vision_actor(settings: Settings):  # -> ray.actor.ActorHandle
    gpus = settings.ray.vision_gpus if settings.vision.device != "cpu" else 0
    return VisionActor.options(num_gpus=gpus).remote(settings)
