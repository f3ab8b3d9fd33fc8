"""Which model serves each role, and whether it loads (for `mediaindex models`)."""

from __future__ import annotations

from collections.abc import Callable

from mediaindex.config import Settings


def _try(load: Callable[[], object]) -> str:
    try:
        load()
        return "ok"
    except Exception as exc:  # report every failure kind as a status line
        return f"error: {exc}"


def check_models(settings: Settings) -> list[tuple[str, str, str]]:
    from mediaindex.models.speech import SpeechModel
    from mediaindex.models.text_embed import load_text_embedder

    rows = [
        ("speech", f"{settings.speech.model} ({settings.speech.device}, {settings.speech.compute_type})",
         _try(lambda: SpeechModel(settings.speech, settings.cache_dir))),
        ("text embedding", settings.embed.model, _try(lambda: load_text_embedder(settings.embed))),
    ]
    return rows
