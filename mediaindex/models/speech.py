"""Speech to text with faster-whisper: VAD-chunked, batched, with word timestamps.

Audio is consumed in chunks (cut in pauses), so a long file is never held whole; silence and music
are found by the bundled Silero VAD and never reach the model; segments that still look like
hallucinations (no speech and low confidence, repetitive text, only music symbols) are dropped.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable
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
    compression_ratio: float = 1.0


@dataclass
class Transcript:
    language: str | None
    language_probability: float
    duration: float
    segments: list[SpeechSegment] = field(default_factory=list)
    speech_seconds: float = 0.0  # audio the VAD found speech in (what the model decoded)
    dropped: int = 0  # segments dropped as likely hallucinations

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
            compression_ratio=seg.compression_ratio,
        )
        for ws in pieces
        if ws
    ]


# Text whisper emits for music or noise rather than words: music notes, or a bracketed caption.
_NON_SPEECH = re.compile(r"^[\s\W_]*$|^[\s♪♫♬♩*#-]*[\[(（【]?\s*(music|musique|musik|música|applause|laughter|silence|"
                         r"noise|background noise|inaudible|no speech|blank_audio)\s*[\])）】]?[\s♪♫♬♩*.-]*$", re.I)


def compression_ratio(text: str) -> float:
    """gzip ratio of the text: high for the looping repetitions whisper produces on noise."""
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


def is_hallucination(seg: SpeechSegment, s: SpeechSettings) -> bool:
    if _NON_SPEECH.match(seg.text):
        return True
    if seg.no_speech_prob > s.no_speech_threshold and seg.avg_logprob < s.log_prob_threshold:
        return True
    return seg.avg_logprob < s.min_avg_logprob or seg.compression_ratio > s.compression_ratio_threshold


def pause_cut(audio: np.ndarray, tail_seconds: float = 30.0) -> int:
    """A sample index near the end of `audio` that falls in a pause (the middle of the widest gap
    between speech regions in the tail), so a chunk boundary never splits a word."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    tail_start = max(0, len(audio) - int(tail_seconds * SAMPLE_RATE))
    tail = audio[tail_start:]
    regions = get_speech_timestamps(tail, VadOptions(min_silence_duration_ms=160, speech_pad_ms=100))
    if not regions:
        return len(audio)
    edges = [0] + [x for r in regions for x in (r["start"], r["end"])] + [len(tail)]
    gaps = [(edges[i + 1] - edges[i], edges[i]) for i in range(0, len(edges), 2)]
    width, at = max(gaps)
    if width < SAMPLE_RATE // 10:  # continuous speech: cut at the end of the last region
        return tail_start + regions[-1]["end"] if regions[-1]["end"] < len(tail) else len(audio)
    return tail_start + at + width // 2


def group_passages(segments: list[SpeechSegment], target: float, max_seconds: float = 20.0,
                   max_gap: float = 2.0) -> list[SpeechSegment]:
    """Join whisper's short segments (often a clause) into passages of about `target` seconds.

    A search hit should point at a moment with enough words around it for the text embedding to
    carry its meaning; a passage never spans a long pause or grows past `max_seconds`.
    """
    out: list[SpeechSegment] = []
    for seg in segments:
        prev = out[-1] if out else None
        if (prev is not None and prev.end - prev.start < target and seg.start - prev.end <= max_gap
                and seg.end - prev.start <= max_seconds):
            a, b = prev.end - prev.start, seg.end - seg.start
            weight = a / (a + b) if a + b > 0 else 0.5
            out[-1] = SpeechSegment(
                start=prev.start, end=seg.end, text=f"{prev.text} {seg.text}".strip(),
                avg_logprob=round(weight * prev.avg_logprob + (1 - weight) * seg.avg_logprob, 4),
                no_speech_prob=max(prev.no_speech_prob, seg.no_speech_prob), words=prev.words + seg.words,
                compression_ratio=compression_ratio(f"{prev.text} {seg.text}"),
            )
        else:
            out.append(seg)
    return out


class SpeechModel:
    """faster-whisper behind `transcribe(audio)` and `transcribe_stream(chunks)`; loads the model once."""

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
        self.multilingual = bool(self.model.model.is_multilingual)

    def transcribe(self, audio: np.ndarray) -> Transcript:
        """Transcribe 16 kHz mono float32 audio held in memory (a short clip)."""
        return self.transcribe_stream([np.asarray(audio, dtype=np.float32)])

    def transcribe_stream(self, chunks: Iterable[np.ndarray]) -> Transcript:
        """Transcribe audio arriving in chunks; at most about two chunks are held at a time.

        Each part handed to the model ends in a pause. The language is detected on the first part
        with speech and kept for the rest of the file.
        """
        s = self.settings
        part_samples = int(s.chunk_seconds * SAMPLE_RATE)
        out = Transcript(language=s.language, language_probability=1.0 if s.language else 0.0, duration=0.0)
        buffer = np.zeros(0, dtype=np.float32)
        offset = 0.0
        for chunk in chunks:
            buffer = np.concatenate([buffer, np.asarray(chunk, dtype=np.float32).reshape(-1)])
            out.duration += len(chunk) / SAMPLE_RATE
            while len(buffer) >= part_samples:
                cut = pause_cut(buffer[:part_samples])
                self._transcribe_part(buffer[:cut], offset, out)
                offset += cut / SAMPLE_RATE
                buffer = buffer[cut:]
        if len(buffer):
            self._transcribe_part(buffer, offset, out)
        if not out.segments:
            out.language, out.language_probability = None, 0.0
        return out

    def _speech_seconds(self, audio: np.ndarray) -> float:
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        regions = get_speech_timestamps(audio, VadOptions(max_speech_duration_s=30, min_silence_duration_ms=160))
        return sum(r["end"] - r["start"] for r in regions) / SAMPLE_RATE

    def _transcribe_part(self, audio: np.ndarray, offset: float, out: Transcript) -> None:
        s = self.settings
        if len(audio) < SAMPLE_RATE // 10 or not np.any(audio):
            return  # digital silence: nothing to decode
        if s.vad:
            speech = self._speech_seconds(audio)
            if speech == 0:
                return  # music, noise or silence only: the model never sees it
            out.speech_seconds += speech
        else:
            out.speech_seconds += len(audio) / SAMPLE_RATE
        common = dict(
            language=out.language if out.language else None,
            beam_size=s.beam_size,
            word_timestamps=True,
            condition_on_previous_text=False,
            no_speech_threshold=s.no_speech_threshold,
            log_prob_threshold=s.log_prob_threshold,
            compression_ratio_threshold=s.compression_ratio_threshold,
        )
        if s.batched:
            clips = None
            if not s.vad:  # without VAD the batched pipeline needs fixed windows
                dur = len(audio) / SAMPLE_RATE
                clips = [{"start": t, "end": min(t + 30.0, dur)} for t in np.arange(0.0, dur, 30.0)]
            # Timestamp tokens keep the decoder going through a full 30 s chunk; without them
            # whisper-base often stops after the first sentence and drops the rest of the chunk.
            segments, info = self.batched.transcribe(
                audio, batch_size=s.batch_size, vad_filter=s.vad, clip_timestamps=clips,
                without_timestamps=False, **common
            )
        else:
            segments, info = self.model.transcribe(audio, vad_filter=s.vad, **common)
        kept: list[SpeechSegment] = []
        for seg in segments:
            text = seg.text.strip()
            piece = SpeechSegment(
                start=round(float(seg.start) + offset, 3),
                end=round(float(seg.end) + offset, 3),
                text=text,
                avg_logprob=float(seg.avg_logprob),
                no_speech_prob=float(seg.no_speech_prob),
                words=tuple(
                    Word(round(float(w.start) + offset, 3), round(float(w.end) + offset, 3), w.word.strip(),
                         float(w.probability))
                    for w in (seg.words or [])
                ),
                compression_ratio=compression_ratio(text),
            )
            if is_hallucination(piece, s):
                out.dropped += 1
                continue
            kept.extend(split_sentences(piece))
        kept = group_passages(kept, s.segment_seconds) if s.segment_seconds > 0 else kept
        if kept and out.language is None:
            out.language = info.language
            out.language_probability = float(info.language_probability)
        out.segments.extend(kept)
