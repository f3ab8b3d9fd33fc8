"""Speech to text with faster-whisper: VAD-chunked, batched, with word timestamps."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mediaindex.config import SpeechSettings
from mediaindex.errors import ModelLoadError
from mediaindex.models.bundled import whisper_model_dir

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    text: str
    probability: float


@dataclass(frozen=True)
class SpeechSegment:
    start: float
    end: float
    text: str
    avg_logprob: float
    no_speech_prob: float
    words: tuple[Word, ...] = ()


@dataclass
class Transcript:
    language: str | None
    language_probability: float
    duration: float
    segments: list[SpeechSegment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.segments).strip()


def resolve_model(name: str, cache_dir: Path) -> str:
    """A bundled model name, a local CTranslate2 directory, or a hub id passed through as is."""
    bundled = whisper_model_dir(name, cache_dir / "models")
    if bundled is not None:
        return str(bundled)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "model.bin").is_file():
            raise ModelLoadError(f"speech model directory {path} has no model.bin (not a faster-whisper model)")
        return str(path)
    if "/" in name and (name.startswith((".", "/", "~"))):
        raise ModelLoadError(f"speech model path {name} does not exist")
    return name  # a faster-whisper size name or hub id; loading it needs the hub


def split_sentences(seg: SpeechSegment, max_seconds: float = 12.0) -> list[SpeechSegment]:
    """Split a long segment at sentence ends (by its word timestamps): short spans search better.

    Batched decoding returns one segment per VAD chunk (up to 30 s); a hit should point at the
    sentence, not the half minute around it.
    """
    if not seg.words or seg.end - seg.start <= max_seconds:
        return [seg]
    pieces: list[list[Word]] = [[]]
    for word in seg.words:
        current = pieces[-1]
        current.append(word)
        span = current[-1].end - current[0].start
        if (word.text.endswith((".", "?", "!", "。", "？", "！")) and span >= 2.0) or span >= max_seconds:
            pieces.append([])
    return [
        SpeechSegment(
            start=round(ws[0].start, 3), end=round(ws[-1].end, 3),
            text=" ".join(w.text for w in ws).strip(),
            avg_logprob=seg.avg_logprob, no_speech_prob=seg.no_speech_prob, words=tuple(ws),
        )
        for ws in pieces
        if ws
    ]


class SpeechModel:
    """faster-whisper behind one `transcribe(audio)` call; loads the model once."""

    def __init__(self, settings: SpeechSettings, cache_dir: Path) -> None:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        self.settings = settings
        model_path = resolve_model(settings.model, cache_dir)
        device = settings.device
        if device == "auto":
            import ctranslate2

            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        threads = settings.cpu_threads or min(4, os.cpu_count() or 1)
        try:
            self.model = WhisperModel(
                model_path, device=device, compute_type=settings.compute_type, cpu_threads=threads
            )
        except Exception as exc:  # CTranslate2 raises RuntimeError/ValueError/OSError variants
            raise ModelLoadError(f"cannot load speech model {settings.model!r}: {exc}") from exc
        self.batched = BatchedInferencePipeline(self.model)
        self.name = settings.model

    def transcribe(self, audio: np.ndarray) -> Transcript:
        """Transcribe 16 kHz mono float32 audio. Non-speech is skipped by the Silero VAD."""
        audio = np.asarray(audio, dtype=np.float32)
        duration = len(audio) / SAMPLE_RATE
        if duration == 0 or not np.any(audio):
            return Transcript(language=None, language_probability=0.0, duration=duration)
        s = self.settings
        common = dict(
            language=s.language,
            beam_size=s.beam_size,
            word_timestamps=True,
            condition_on_previous_text=False,
        )
        if s.vad:
            segments, info = self.batched.transcribe(audio, batch_size=s.batch_size, vad_filter=True, **common)
        else:
            segments, info = self.model.transcribe(audio, vad_filter=False, **common)
        whole = [
            SpeechSegment(
                start=round(float(seg.start), 3),
                end=round(float(seg.end), 3),
                text=seg.text.strip(),
                avg_logprob=float(seg.avg_logprob),
                no_speech_prob=float(seg.no_speech_prob),
                words=tuple(Word(float(w.start), float(w.end), w.word.strip(), float(w.probability)) for w in (seg.words or [])),
            )
            for seg in segments
            if seg.text.strip()
        ]
        out = [piece for seg in whole for piece in split_sentences(seg)]
        return Transcript(
            language=info.language if out else None,
            language_probability=float(info.language_probability),
            duration=duration,
            segments=out,
        )
