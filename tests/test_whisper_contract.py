"""The contract between `mediaindex.models.whisper_adapter` and faster-whisper's non-public parts it relies on.

If an upgrade of faster-whisper renames, reorders or removes one of them (or adds a parameter the adapter does not
pass), a test here fails naming it; the last test runs the adapter's seek loop over a real recording."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediaindex.media.decode import decode_audio
from mediaindex.models.speech import SpeechModel
from mediaindex.models.whisper_adapter import WhisperInternals, vad_regions
from tests.conftest import media

# Each callable the adapter calls, with the parameters it relies on, in order (self included for methods). Any
# parameter after these must have a default: the adapter passes nothing else.
CALLABLES: dict[str, tuple[str, ...]] = {
    "faster_whisper.vad.get_speech_timestamps": ("audio", "vad_options"),
    "faster_whisper.audio.pad_or_trim": ("array",),
    "faster_whisper.tokenizer.Tokenizer": ("tokenizer", "multilingual", "task", "language"),
    "faster_whisper.tokenizer.Tokenizer.decode": ("self", "tokens"),
    "faster_whisper.WhisperModel.encode": ("self", "features"),
    "faster_whisper.WhisperModel.get_prompt": ("self", "tokenizer", "previous_tokens", "without_timestamps"),
    "faster_whisper.WhisperModel.generate_with_fallback": ("self", "encoder_output", "prompt", "tokenizer",
                                                           "options"),
    "faster_whisper.WhisperModel._split_segments_by_timestamps": ("self", "tokenizer", "tokens", "time_offset",
                                                                  "segment_size", "segment_duration", "seek"),
    "faster_whisper.WhisperModel.add_word_timestamps": ("self", "segments", "tokenizer", "encoder_output",
                                                        "num_frames", "prepend_punctuations", "append_punctuations",
                                                        "last_speech_timestamp"),
}

# Dataclasses the adapter builds or reads by field name.
FIELDS: dict[str, set[str]] = {
    "faster_whisper.vad.VadOptions": {"threshold", "max_speech_duration_s", "min_silence_duration_ms",
                                      "speech_pad_ms"},
    "faster_whisper.transcribe.Segment": {"id", "seek", "start", "end", "text", "tokens", "avg_logprob",
                                          "compression_ratio", "no_speech_prob", "temperature", "words"},
    "faster_whisper.transcribe.Word": {"start", "end", "word", "probability"},
    "faster_whisper.transcribe.TranscriptionOptions": {"without_timestamps", "log_prob_threshold",
                                                       "no_speech_threshold", "prepend_punctuations",
                                                       "append_punctuations"},
    "faster_whisper.transcribe.TranscriptionInfo": {"transcription_options"},
}

# Classes the adapter builds with every field it names (any other field must have a default).
BUILT = {"faster_whisper.transcribe.Segment"}

JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


def _resolve(dotted: str) -> Any:
    """The object at a dotted path (module, then attributes); fails naming the part that is missing."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for i, name in enumerate(parts[split:], start=split):
            if not hasattr(obj, name):
                pytest.fail(f"faster-whisper no longer has {'.'.join(parts[: i + 1])} (the speech adapter calls it)")
            obj = getattr(obj, name)
        return obj
    pytest.fail(f"cannot import any module of {dotted}")


@pytest.mark.parametrize("dotted", sorted(CALLABLES))
def test_private_callables_keep_their_parameters(dotted: str) -> None:
    target: Callable[..., Any] = _resolve(dotted)
    params = list(inspect.signature(target).parameters.values())
    names = tuple(p.name for p in params)
    expected = CALLABLES[dotted]
    assert names[: len(expected)] == expected, (
        f"{dotted} now takes {names}; the speech adapter passes {expected} in this order"
    )
    required = [p.name for p in params[len(expected):]
                if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert not required, f"{dotted} now also requires {required}, which the speech adapter does not pass"


@pytest.mark.parametrize("dotted", sorted(FIELDS))
def test_dataclasses_keep_the_fields_the_adapter_uses(dotted: str) -> None:
    cls = _resolve(dotted)
    assert dataclasses.is_dataclass(cls), f"{dotted} is no longer a dataclass"
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = FIELDS[dotted] - set(fields)
    assert not missing, f"{dotted} lost the fields {sorted(missing)} that the speech adapter uses"
    if dotted in BUILT:
        unset = [name for name, f in fields.items() if name not in FIELDS[dotted]
                 and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        assert not unset, f"{dotted} now requires {unset}, which the speech adapter does not set"


def test_tokenizer_names_the_first_timestamp_token() -> None:
    tokenizer = _resolve("faster_whisper.tokenizer.Tokenizer")
    assert isinstance(inspect.getattr_static(tokenizer, "timestamp_begin"), property), (
        "faster_whisper.tokenizer.Tokenizer.timestamp_begin is no longer a property"
    )


@pytest.mark.slow
def test_a_loaded_model_has_what_the_adapter_reads(whisper_base: SpeechModel) -> None:
    model = whisper_base.model
    for name in ("feature_extractor", "hf_tokenizer", "time_precision", "frames_per_second", "model"):
        assert hasattr(model, name), f"WhisperModel has no attribute {name!r} any more"
    for name in ("nb_max_frames", "hop_length", "time_per_frame"):
        assert hasattr(model.feature_extractor, name), f"WhisperModel.feature_extractor has no {name!r} any more"
    assert callable(model.feature_extractor)
    assert hasattr(model.model, "is_multilingual") and callable(model.model.detect_language)


def _transcribe(whisper: WhisperInternals, path: Path) -> tuple[str, str]:
    """(language, text) of a short recording: one window's language, then the seek loop over its speech."""
    audio = decode_audio(path)
    features = whisper.features(audio)
    content = features.shape[-1] - 1
    language = whisper.languages(whisper.encode(features, 0, whisper.max_frames))[0][0]
    options = whisper.decoding_options(language=language, vad_filter=False, word_timestamps=True,
                                       condition_on_previous_text=False)
    texts: list[str] = []
    seek, last_word_end = 0, 0.0
    while seek < content:
        frames = min(whisper.max_frames, content - seek)
        encoded = whisper.encode(features, seek, frames)
        segments, next_seek, last_word_end = whisper.decode_window(
            encoded, seek, frames, language, options, last_word_end, last=seek + frames >= content)
        texts += [seg.text.strip() for seg in segments]
        assert all(seg.words for seg in segments), "word timestamps are missing"
        seek = max(next_seek, seek + 1)
    return language, " ".join(texts)


@pytest.mark.slow
def test_the_adapter_transcribes_jfk_exactly(whisper_base: SpeechModel) -> None:
    language, text = _transcribe(whisper_base.whisper, media("audio/jfk.flac"))
    assert language == "en"
    # Word for word; a comma after "And so" comes and goes with the CPU's int8 matrix backend (MKL on Intel,
    # oneDNN elsewhere), so punctuation and case are left out of the comparison.
    assert re.findall(r"[\w']+", text.lower()) == re.findall(r"[\w']+", JFK_TEXT.lower()), text


def test_vad_finds_the_speech_of_a_real_recording() -> None:
    audio = decode_audio(media("audio/jfk.flac"))
    regions = vad_regions(audio, min_silence_duration_ms=160, speech_pad_ms=100)
    assert regions and all(0 <= a < b <= len(audio) for a, b in regions)
    assert sum(b - a for a, b in regions) > 0.5 * len(audio)  # JFK speaks for most of the clip
