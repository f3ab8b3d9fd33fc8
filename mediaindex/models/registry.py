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
    from mediaindex.models.vision import load_classifier, load_clip, load_people, load_text_reader

    rows = [
        ("speech", f"{settings.speech.model} ({settings.speech.device}, {settings.speech.compute_type})",
         _try(lambda: SpeechModel(settings.speech, settings.cache_dir))),
        ("text embedding", settings.embed.model, _try(lambda: load_text_embedder(settings.embed, settings.cache_dir))),
    ]
    rows.append(("language model", f"{settings.llm.model} ({settings.llm.device}, {settings.llm.dtype})",
                 _llm_status(settings)))
    v = settings.vision
    # Every role has a row: one that is switched off says so and how it is switched on.
    if v.enabled and v.ocr:
        rows.append(("ocr", v.ocr_model, _try(lambda: load_text_reader(v))))
    else:
        rows.append(("ocr", "none", "off (vision.ocr)"))
    if v.enabled and v.classifier:
        rows.append(("image classes", f"{v.classifier} ({v.device})", _try(lambda: load_classifier(v))))
    else:
        rows.append(("image classes", "none", "off (vision.classifier)"))
    if v.enabled and v.people:
        rows.append(("people", "BlazeFace + BlazePose (MediaPipe)", _try(lambda: load_people(v, settings.cache_dir))))
    else:
        rows.append(("people", "none", "off (vision.people)"))
    if v.enabled and v.clip:
        rows.append(("text-image (CLIP)", f"{v.clip} ({v.device})", _try(lambda: load_clip(v))))
    else:
        rows.append(("text-image (CLIP)", "none", "off (vision.clip: no CLIP weights ship on PyPI)"))
    return rows


def _llm_status(settings: Settings) -> str:
    """Whether the language model's weights are there, without loading it (that takes a while and much memory)."""
    from mediaindex.models.bundled import BundledModelError, bundled_lm, lm_parts

    lm = bundled_lm(settings.llm.model)
    if lm is None:
        return "ok (loads when a summary or answer needs it)"
    if (settings.cache_dir / "llm" / lm.name / "config.json").is_file():
        return "ok (verified and converted in the cache)"
    try:
        lm_parts(lm, settings.cache_dir)
    except BundledModelError as exc:
        return f"error: {exc}"
    return "ok (parts present; joined, verified and converted on first use)"
