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
    from mediaindex.models.vision import load_classifier, load_clip, load_text_reader

    rows = [
        ("speech", f"{settings.speech.model} ({settings.speech.device}, {settings.speech.compute_type})",
         _try(lambda: SpeechModel(settings.speech, settings.cache_dir))),
        ("text embedding", settings.embed.model, _try(lambda: load_text_embedder(settings.embed))),
    ]
    v = settings.vision
    # Every role has a row: one that is switched off says so and how it is switched on.
    if v.enabled and v.ocr:
        rows.append(("ocr", "rapidocr (PP-OCRv4)", _try(lambda: load_text_reader(v))))
    else:
        rows.append(("ocr", "none", "off (vision.ocr)"))
    if v.enabled and v.classifier:
        rows.append(("image classes", f"{v.classifier} ({v.device})", _try(lambda: load_classifier(v))))
    else:
        rows.append(("image classes", "none", "off (vision.classifier)"))
    if v.enabled and v.clip:
        rows.append(("text-image (CLIP)", f"{v.clip} ({v.device})", _try(lambda: load_clip(v))))
    else:
        rows.append(("text-image (CLIP)", "none", "off (vision.clip: no CLIP weights ship on PyPI)"))
    llm = settings.llm
    rows.append(("language (summaries, answers)", f"{llm.model} ({llm.device}, {llm.dtype})",
                 _try(lambda: _load_language_model(llm.model, llm.dtype))))
    return rows


def _load_language_model(model: str, dtype: str) -> None:
    """The weights and tokenizer, as the serving engine loads them (no engine, no KV cache)."""
    import torch

    from mediaindex.serving.model_runner import load_pretrained, load_smollm2

    if model == "smollm2":
        load_smollm2()
    else:
        load_pretrained(model, dtype=getattr(torch, dtype))
