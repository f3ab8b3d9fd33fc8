"""Speech to text with faster-whisper: VAD regions, a language per stretch of speech, word timestamps.

Audio is consumed in chunks (cut in pauses), so a long file is never held whole. In each chunk the
bundled Silero VAD finds the speech regions (silence and music never reach the model); their audio,
long silences cut out, is decoded in Whisper's own seek loop: each 30 s window starts where the text of
the one before ended, so every encoder pass sees a full window of speech. Whisper names the language of
every window from that same encoder pass, so a file in one language costs nothing extra; a window whose
language is unsure (speech in two languages may meet in it) is looked at again stretch by stretch (a few
seconds each) and, where the language changes, ends there. An unsure language stands only where the window
reads better in it (Whisper surer of its tokens) than in the language spoken before, or at the start the
detector's close second choice: an accent can sound like another language to the detector, and speech decoded
in a language it is not in comes out a garbled translation. Segments that look like hallucinations (no
speech and low confidence, repetitive text, only music symbols) are dropped, and so is a phrase the
decoder says over and over (`without_loops`); the words are regrouped
into sentences (`mediaindex.models.sentences`), each tagged with its language.

The seek loop uses parts of faster-whisper outside its public API; they are reached only through
`mediaindex.models.whisper_adapter`, whose contract test fails when an upgrade changes them."""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mediaindex.config import SpeechSettings
from mediaindex.errors import ModelLoadError
from mediaindex.models.bundled import whisper_model_dir
from mediaindex.models.cache import cached
from mediaindex.models.sentences import TimedWord, sentence_text, sentences
from mediaindex.models.text_language import LANGUAGES, query_language
from mediaindex.models.whisper_adapter import WhisperInternals, vad_regions
from mediaindex.segments import UNSPACED_LANGUAGES, join_words

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
    language: str | None = None


@dataclass
class Transcript:
    language: str | None  # the language most of the speech is in; each segment has its own
    language_probability: float
    duration: float
    segments: list[SpeechSegment] = field(default_factory=list)
    speech_seconds: float = 0.0  # audio the VAD found speech in (what the model decoded)
    dropped: int = 0  # segments dropped as likely hallucinations
    looped_words: int = 0  # words dropped as repeats of a decoding loop (`without_loops`)
    encoder_passes: int = 0  # windows encoded, language re-checks included (what speech costs)
    # Seconds of speech and summed detection probability per language, over the windows.
    language_seconds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.segments).strip()

    @property
    def languages(self) -> list[str]:
        """Every language spoken, most speech first."""
        return sorted(self.language_seconds, key=lambda lang: -self.language_seconds[lang][0])

    def count_language(self, language: str, seconds: float, probability: float) -> None:
        total = self.language_seconds.setdefault(language, [0.0, 0.0])
        total[0] += seconds
        total[1] += probability * seconds


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


# Whisper can fall into a loop on noisy audio: one phrase decoded again and again, each time its own short
# segment, so no single segment's compression ratio gives it away ("Yeah, take the name of the car." thirteen
# times over twenty seconds of radio). A phrase of at least LOOP_WORDS words said LOOP_REPEATS times or more in a
# row is kept once; people rarely say a whole phrase three times running, a looping decoder always does.
LOOP_WORDS = 3
LOOP_REPEATS = 3
_LOOP_MAX_WORDS = 24


def _loop_key(word: str) -> str:
    return "".join(ch for ch in word.casefold() if ch.isalnum())


def looped_words(words: Sequence[str]) -> set[int]:
    """Indexes of the words that repeat a looping phrase: every occurrence after the first of a phrase of
    at least LOOP_WORDS words said LOOP_REPEATS times or more in a row, and a trailing start of it."""
    keys = [_loop_key(w) for w in words]
    looped: set[int] = set()
    i = 0
    while i < len(keys):
        step = 1
        for n in range(LOOP_WORDS, min(_LOOP_MAX_WORDS, (len(keys) - i) // LOOP_REPEATS) + 1):
            phrase = keys[i:i + n]
            if not any(phrase):
                continue
            times = 1
            while keys[i + times * n:i + (times + 1) * n] == phrase:
                times += 1
            if times < LOOP_REPEATS:
                continue
            end = i + times * n
            while end < len(keys) and keys[end] == phrase[(end - i) % n]:
                end += 1  # the loop's last, unfinished round ("Yeah, take the name of")
            looped.update(range(i + n, end))
            step = end - i
            break
        i += step
    return looped


def without_loops(segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], int]:
    """The segments with looping repeats taken out (`looped_words`, across segment bounds), and how many
    words went. A segment left without words is dropped; one that lost some keeps the rest."""
    flat = [(k, j) for k, seg in enumerate(segments) for j in range(len(seg.words))]
    looped = looped_words([segments[k].words[j].text for k, j in flat])
    if not looped:
        return segments, 0
    gone: dict[int, set[int]] = {}
    for i in looped:
        k, j = flat[i]
        gone.setdefault(k, set()).add(j)
    out: list[SpeechSegment] = []
    for k, seg in enumerate(segments):
        if k not in gone:
            out.append(seg)
            continue
        words = tuple(w for j, w in enumerate(seg.words) if j not in gone[k])
        if words:
            text = join_words([w.text for w in words], seg.language)
            out.append(replace(seg, start=words[0].start, end=words[-1].end, text=text, words=words,
                               compression_ratio=compression_ratio(text)))
    return out, len(looped)


FALLBACK_TEMPERATURES = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]  # faster-whisper's: a failed window is re-sampled hotter


# A language whose detected probability is at least this share of the detected one's is a close candidate.
CLOSE_CANDIDATE = 1 / 3


def _reads_better(window: list, other: list) -> bool:
    """Whether one decoding of a window reads better than another: it holds text, and Whisper is surer of its
    tokens (the mean log-probability, which every segment of a window carries)."""
    return bool(window) and (not other or window[0].avg_logprob > other[0].avg_logprob)


def is_narrowband(sample_rate: int | None, settings: SpeechSettings) -> bool:
    """Whether a source sampled at `sample_rate` Hz carries only telephone or radio band speech (nothing
    above 4 kHz): at or below `settings.narrowband_rate` (0: never)."""
    return sample_rate is not None and 0 < sample_rate <= settings.narrowband_rate


def pause_cut(audio: np.ndarray, tail_seconds: float = 30.0) -> int:
    """A sample index near the end of `audio` that falls in a pause (the middle of the widest gap
    between speech regions in the tail), so a chunk boundary never splits a word."""
    tail_start = max(0, len(audio) - int(tail_seconds * SAMPLE_RATE))
    tail = audio[tail_start:]
    regions = vad_regions(tail, min_silence_duration_ms=160, speech_pad_ms=100)
    if not regions:
        return len(audio)
    edges = [0] + [x for region in regions for x in region] + [len(tail)]
    gaps = [(edges[i + 1] - edges[i], edges[i]) for i in range(0, len(edges), 2)]
    width, at = max(gaps)
    last_end = regions[-1][1]
    if width < SAMPLE_RATE // 10:  # continuous speech: cut at the end of the last region
        return tail_start + last_end if last_end < len(tail) else len(audio)
    return tail_start + at + width // 2


WINDOW_SAMPLES = 30 * SAMPLE_RATE  # whisper's encoder always looks at 30 s
# Pauses shorter than this stay inside a window's audio; longer ones shrink to the regions' padding
# (0.2 s): a pause is enough to end a sentence, and every second of silence kept takes window space
# (an encoder pass costs the same for 30 s of speech or of silence).
JOIN_GAP_SAMPLES = 1 * SAMPLE_RATE
DETECT_SAMPLES = 4 * SAMPLE_RATE  # an unsure window is re-checked in stretches of about this much speech
# VAD speech that no decoded word covers (after a window's last word, or before or between its words) is decoded
# again, not skipped, where it lasts more than a second (less is a breath or a word's tail), counted from half a
# second off the nearest word (word timestamps are a little early or late).
SKIPPED_SPEECH_S = 1.0
WORD_END_SLACK_S = 0.5
Region = tuple[int, int]  # sample range of speech within a part
PartHook = Callable[[np.ndarray, float, list[Region]], None]


def speech_regions(audio: np.ndarray, threshold: float = 0.5) -> list[Region]:
    """The VAD's speech regions (fine-grained: a pause of 160 ms separates two), each at most 30 s;
    `threshold` is the speech probability a frame needs (SpeechSettings.vad_threshold)."""
    found = vad_regions(audio, threshold=threshold, max_speech_duration_s=30, min_silence_duration_ms=160,
                        speech_pad_ms=100)
    return [(start, end) for start, end in found if end > start]


@dataclass(frozen=True)
class Window:
    """Speech regions decoded together: their audio, short pauses kept and long silences cut out."""

    regions: tuple[Region, ...]

    @property
    def pieces(self) -> list[Region]:
        out: list[Region] = []
        for start, end in self.regions:
            if out and start - out[-1][1] <= JOIN_GAP_SAMPLES:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
        return out

    @property
    def local_regions(self) -> list[Region]:
        """Each region as a sample range of the window's audio."""
        out: list[Region] = []
        pieces, piece, before = self.pieces, 0, 0
        for a, b in self.regions:
            while pieces[piece][1] < b:  # regions are in order, each inside one piece
                before += pieces[piece][1] - pieces[piece][0]
                piece += 1
            out.append((before + a - pieces[piece][0], before + b - pieces[piece][0]))
        return out

    @property
    def samples(self) -> int:
        return sum(b - a for a, b in self.pieces)

    def audio(self, part: np.ndarray) -> np.ndarray:
        return np.concatenate([part[a:b] for a, b in self.pieces])

    def piece_of(self, t: float) -> int:
        """Which piece a time in the window's audio falls in."""
        at = t * SAMPLE_RATE
        for i, (a, b) in enumerate(self.pieces):
            if at <= b - a:
                return i
            at -= b - a
        return len(self.pieces) - 1

    def part_time(self, t: float, piece: int | None = None) -> float:
        """A time in the window's audio, as seconds from the start of the part (within `piece` if given)."""
        pieces = self.pieces
        piece = self.piece_of(t) if piece is None else piece
        before = sum(b - a for a, b in pieces[:piece])
        return (pieces[piece][0] + t * SAMPLE_RATE - before) / SAMPLE_RATE


def speech_windows(regions: Sequence[Region], max_samples: int = WINDOW_SAMPLES) -> list[Window]:
    windows: list[Window] = []
    current: list[Region] = []
    for region in regions:
        if current and Window((*current, region)).samples > max_samples:
            windows.append(Window(tuple(current)))
            current = []
        current.append(region)
    if current:
        windows.append(Window(tuple(current)))
    return windows


def detection_groups(regions: Sequence[Region], start: int, end: int) -> list[int]:
    """Where each stretch of a few seconds of speech begins (too little speech names no language), for the
    speech between samples `start` and `end` of a window's audio: the first at `start`, each stretch
    running to the next one's beginning (pauses included)."""
    starts, speech = [start], 0
    for a, b in regions:
        a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        if speech >= DETECT_SAMPLES:
            starts.append(a)
            speech = 0
        speech += b - a
    if len(starts) > 1 and speech < DETECT_SAMPLES // 2:
        starts.pop()  # a last stretch too short to name joins the one before
    return starts


def _uncovered(regions: Sequence[Region], heard: Sequence[tuple[float, float]], start: float,
               end: float) -> list[tuple[float, float]]:
    """The stretches (seconds) of speech `regions` (samples) between `start` and `end` that lie more than
    WORD_END_SLACK_S from every `heard` word and last over SKIPPED_SPEECH_S."""
    out: list[tuple[float, float]] = []
    for a, b in regions:
        pieces = [(max(a / SAMPLE_RATE, start), min(b / SAMPLE_RATE, end))]
        for w0, w1 in heard:
            cut_a, cut_b = w0 - WORD_END_SLACK_S, w1 + WORD_END_SLACK_S
            pieces = [q for p0, p1 in pieces for q in ((p0, min(p1, cut_a)), (max(p0, cut_b), p1)) if q[1] > q[0]]
        out += [(p0, p1) for p0, p1 in pieces if p1 - p0 > SKIPPED_SPEECH_S]
    return out


def _skipped_speech(regions: Sequence[Region], last_word_end: float, next_seek: int,
                    seconds_per_frame: float) -> int | None:
    """The frame to decode again from when whisper ended a window before speech the VAD heard in it (a timestamp
    alone at the end of its text means "nothing more here", and it is sometimes wrong: a short sentence, a pause,
    then a long one lost whole); None when what follows its last word is no more than SKIPPED_SPEECH_S of speech."""
    after = last_word_end + WORD_END_SLACK_S
    until = next_seek * seconds_per_frame
    heard = sum(max(0.0, min(b / SAMPLE_RATE, until) - max(a / SAMPLE_RATE, after)) for a, b in regions)
    resume = round(last_word_end / seconds_per_frame)
    return resume if heard > SKIPPED_SPEECH_S and resume < next_seek else None


class SpeechModel:
    """faster-whisper behind `transcribe(audio)` and `transcribe_stream(chunks)`.

    The Whisper weights are loaded once per process and shared (CTranslate2 takes concurrent calls on one model):
    each small job of `ingest --watch` reuses the copy loaded first. What holds a transcription's state (the batched
    pipeline, the decoding options) is this object's own."""

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
            self.model = cached(("whisper", str(model_path), device, settings.compute_type, threads),
                                lambda: WhisperModel(model_path, device=device, compute_type=settings.compute_type,
                                                     cpu_threads=threads))
        except Exception as exc:  # CTranslate2 raises RuntimeError/ValueError/OSError variants
            raise ModelLoadError(f"cannot load speech model {settings.model!r}: {exc}") from exc
        self.batched = BatchedInferencePipeline(self.model)
        self.whisper = WhisperInternals(self.model)  # the seek loop's pieces
        self.name = settings.model
        self.multilingual = self.whisper.multilingual
        self._options_built: dict[bool, tuple[SpeechSettings, object]] = {}

    def transcribe(self, audio: np.ndarray, narrowband: bool = False) -> Transcript:
        """Transcribe 16 kHz mono float32 audio held in memory (a short clip)."""
        return self.transcribe_stream([np.asarray(audio, dtype=np.float32)], narrowband=narrowband)

    def transcribe_stream(self, chunks: Iterable[np.ndarray], on_part: PartHook | None = None,
                          narrowband: bool = False, on_done: Callable[[float], None] | None = None) -> Transcript:
        """Transcribe audio arriving in chunks; at most about two chunks are held at a time.

        Each part handed to the model ends in a pause; the language is found per window of speech.
        `on_part(audio, offset, regions)` sees every part with its speech regions (e.g. for speakers).
        `narrowband` audio (`is_narrowband`) gets the VAD's `narrowband_vad_threshold` and is decoded
        without temperature fallback. `on_done(seconds)` hears how much of the audio is transcribed, part by part.
        """
        s = self.settings
        part_samples = int(s.chunk_seconds * SAMPLE_RATE)
        out = Transcript(language=None, language_probability=0.0, duration=0.0)
        buffer = np.zeros(0, dtype=np.float32)
        offset = 0.0
        for chunk in chunks:
            buffer = np.concatenate([buffer, np.asarray(chunk, dtype=np.float32).reshape(-1)])
            out.duration += len(chunk) / SAMPLE_RATE
            while len(buffer) >= part_samples:
                cut = pause_cut(buffer[:part_samples])
                self._transcribe_part(buffer[:cut], offset, out, on_part, narrowband)
                offset += cut / SAMPLE_RATE
                buffer = buffer[cut:]
                if on_done is not None:
                    on_done(offset)
        if len(buffer):
            self._transcribe_part(buffer, offset, out, on_part, narrowband)
        if on_done is not None:
            on_done(out.duration)
        spoken = {seg.language for seg in out.segments}
        languages = [lang for lang in out.languages if lang in spoken]
        if languages:
            seconds, weighted = out.language_seconds[languages[0]]
            out.language, out.language_probability = languages[0], round(weighted / max(seconds, 1e-9), 4)
        return out

    # --- one part: windows, languages, decoding --------------------------------------------------------

    def _transcribe_part(self, audio: np.ndarray, offset: float, out: Transcript,
                         on_part: PartHook | None = None, narrowband: bool = False) -> None:
        s = self.settings
        if len(audio) < SAMPLE_RATE // 10 or not np.any(audio):
            return  # digital silence: nothing to decode
        if s.vad:
            regions = speech_regions(audio, s.narrowband_vad_threshold if narrowband else s.vad_threshold)
        else:
            regions = [(a, min(a + WINDOW_SAMPLES, len(audio))) for a in range(0, len(audio), WINDOW_SAMPLES)]
        if not regions:
            return  # music, noise or silence only: the model never sees it
        out.speech_seconds += sum(b - a for a, b in regions) / SAMPLE_RATE
        if on_part is not None:
            on_part(audio, offset, regions)
        found: list[tuple[Window, str | None, list]] = []
        previous = out.segments[-1].language if out.segments else None
        if s.batched:
            for window in speech_windows(regions):
                language = self._batched_language(audio, window, previous, out)
                found.append((window, language, self._decode_batched(audio, window, language, narrowband)))
                previous = language or previous
        else:
            speech = Window(tuple(regions))
            decoded_runs = self._decode_speech(audio, speech, previous, self._options(narrowband), out)
            found.extend((speech, language, decoded) for language, decoded in decoded_runs)
        kept: list[SpeechSegment] = []
        for run, language, decoded in found:
            for seg in decoded:
                piece = self._segment(seg, run, offset, language)
                if is_hallucination(piece, s):
                    out.dropped += 1
                    continue
                kept.append(self._named_by_its_words(piece, out))
        kept.sort(key=lambda piece: piece.start)  # a stretch decoded on its own may lie before its window's text
        kept, looped = without_loops(kept)
        out.looped_words += looped
        out.segments.extend(regroup(kept, s.segment_seconds) if s.segment_seconds > 0 else kept)

    def _named_by_its_words(self, piece: SpeechSegment, out: Transcript) -> SpeechSegment:
        """The segment tagged with the language its words are plainly in, where that is another of the languages
        whose words are judged (`text_language.LANGUAGES`): a window is decoded in one language, and where two meet
        in it whisper mostly writes the other one's sentence as it was spoken, under the window's tag. Its
        seconds are counted for the language it is in. A language the settings fix is kept."""
        said = piece.language
        if self._fixed_language() is not None or said not in LANGUAGES:
            return piece
        written = query_language(piece.text)
        if written is None or written == said or written not in LANGUAGES:
            return piece
        seconds, weighted = out.language_seconds.get(said, [0.0, 0.0])
        moved = min(piece.end - piece.start, seconds)
        probability = weighted / seconds if seconds > 0 else 0.0
        out.count_language(said, -moved, probability)
        out.count_language(written, moved, probability)
        return replace(piece, language=written)

    def _options(self, narrowband: bool = False):
        """faster-whisper's decoding options for these settings, as its own `transcribe` builds them (once
        per settings: building them runs the feature extractor over a padded 30 s). Narrow-band audio is
        decoded at temperature 0 only: its noise fails the log-prob test in most windows, and the
        re-sampled text is no better, only random and several times dearer."""
        built = self._options_built.get(narrowband)
        if built is not None and built[0] is self.settings:
            return built[1]
        options = self.whisper.decoding_options(
            language="en", vad_filter=False,
            beam_size=self.settings.beam_size, word_timestamps=True, condition_on_previous_text=False,
            no_speech_threshold=self.settings.no_speech_threshold,
            log_prob_threshold=self.settings.log_prob_threshold,
            compression_ratio_threshold=self.settings.compression_ratio_threshold,
            temperature=[0.0] if narrowband else FALLBACK_TEMPERATURES,
        )
        self._options_built[narrowband] = (self.settings, options)
        return options

    def _encode(self, features: np.ndarray, start: int, frames: int, out: Transcript):
        """The encoder output of `frames` feature frames from `start` (at most 30 s, padded to 30 s)."""
        out.encoder_passes += 1
        return self.whisper.encode(features, start, frames)

    def _languages(self, encoder_output) -> list[tuple[str, float]]:
        return self.whisper.languages(encoder_output)

    def _choose(self, probs: list[tuple[str, float]], previous: str | None) -> tuple[str, float]:
        """The detected language; when unsure, the language spoken just before if it is a close candidate
        (a short or unclear stretch should not flip a file's language on a guess)."""
        top, p = probs[0]
        if p < self.settings.language_confidence and previous is not None and previous != top:
            earlier = dict(probs).get(previous, 0.0)
            if earlier >= p * CLOSE_CANDIDATE:
                return previous, earlier
        return top, p

    def _fixed_language(self) -> str | None:
        s = self.settings
        return s.language if s.language else (None if self.multilingual else "en")

    def _batched_language(self, part: np.ndarray, window: Window, previous: str | None, out: Transcript):
        """The batched pipeline encodes by itself: naming a window's language costs an extra pass."""
        language = self._fixed_language()
        if language is None:
            audio = window.audio(part)
            features = self.whisper.features(audio)
            encoded = self._encode(features, 0, self.whisper.max_frames, out)
            language, p = self._choose(self._languages(encoded), previous)
            out.count_language(language, len(audio) / SAMPLE_RATE, p)
        return language

    def _decode_speech(self, part: np.ndarray, speech: Window, previous: str | None, options,
                       out: Transcript) -> Iterator[tuple[str, list]]:
        """(language, whisper segments) for each 30 s window of whisper's seek loop over the speech.

        A window starts where the text of the one before ended, as in faster-whisper's `generate_segments`,
        so a one-language part costs what decoding it without languages would: one encoder pass per window,
        the language read from it. A window that is unsure, or in another language than the speech before
        it, is named again stretch by stretch; where a stretch in another language begins, the window ends
        (encoded again without it) and the next one starts there.
        """
        s = self.settings
        whisper = self.whisper
        fixed = self._fixed_language()
        audio = speech.audio(part)
        features = whisper.features(audio)
        content = features.shape[-1] - 1
        regions = speech.local_regions
        seek, last_word_end, following = 0, 0.0, None
        spoken = previous  # the language of the speech decoded last
        while seek < content:
            frames = min(whisper.max_frames, content - seek)
            encoded = self._encode(features, seek, frames, out)
            if fixed is not None:
                language, p = fixed, 1.0
            else:
                probs = self._languages(encoded)
                language, p = self._choose(probs, previous)
                unsure = p < s.language_confidence
                if unsure or (previous is not None and language != previous):
                    # Unsure, or another language than before: two languages may meet in this window.
                    named = self._first_language(features, regions, seek, frames, previous or language,
                                                 None if unsure else language, out)
                    if named is not None:
                        language, p, switch = named
                        if switch is not None:  # the window ends where the next language begins
                            frames, encoded, following = switch
            # A window that ends where the speech or its language does is not decoded again from its
            # unfinished last sentence: no more audio would follow it there, only another pass.
            last = seek + frames >= content or following is not None
            decoded = whisper.decode_window(encoded, seek, frames, language, options, last_word_end, last)
            # An unsure language stands only if the window reads better in it than in the other candidate: the
            # language spoken before, or at the start the detector's second choice. A speaker's accent can sound
            # like another language to the detector, and speech decoded in a language it is not in comes out a
            # garbled translation; a real change of language reads far worse in the language before.
            if fixed is None and p < s.language_confidence:
                close = [lang for lang, q in probs[:2] if lang != language and q >= p * CLOSE_CANDIDATE]
                other = spoken if spoken is not None else next(iter(close), None)
                if other is not None and other != language:
                    instead = whisper.decode_window(encoded, seek, frames, other, options, last_word_end, last)
                    if _reads_better(instead[0], decoded[0]):
                        language, p, decoded = other, dict(probs).get(other, p), instead
            segments, next_seek, last_word_end = decoded
            if segments and (resume := _skipped_speech(regions, last_word_end, next_seek, whisper.seconds_per_frame)):
                next_seek = resume
            next_seek = min(content, max(next_seek, seek + 1))  # always forward
            if segments:
                yield from self._unheard(features, regions, segments, seek, next_seek, language, options, out)
            out.count_language(language, (next_seek - seek) * whisper.seconds_per_frame, p)
            # After a cut the next window begins in the language found there (already named: no re-check).
            seek, previous, following = next_seek, following or language, None
            if segments:
                spoken = language
                yield language, segments

    def _unheard(self, features: np.ndarray, regions: Sequence[Region], segments: list, seek: int, end: int,
                 language: str, options, out: Transcript) -> Iterator[tuple[str, list]]:
        """(language, segments) of each stretch of VAD speech in the window (frames `seek` to `end`) that no
        decoded word covers, decoded on its own: whisper's text may begin late or jump over a quiet voice among
        louder ones, and such a stretch is lost otherwise. Its language is named again where it is not fixed."""
        whisper = self.whisper
        spf = whisper.seconds_per_frame
        heard = [(float(w.start), float(w.end)) for seg in segments for w in seg.words or []]
        for a, b in _uncovered(regions, heard, seek * spf, end * spf):
            start, frames = round(a / spf), min(whisper.max_frames, round((b - a) / spf))
            encoded = self._encode(features, start, frames, out)
            fixed = self._fixed_language()
            spoken, p = (fixed, 1.0) if fixed else self._choose(self._languages(encoded), language)
            found, _, _ = whisper.decode_window(encoded, start, frames, spoken, options, a, True)
            if found:
                out.count_language(spoken, frames * spf, p)
                yield spoken, found

    def _first_language(self, features: np.ndarray, regions: Sequence[Region], seek: int, frames: int,
                        preferred: str, detected: str | None,
                        out: Transcript) -> tuple[str, float, tuple | None] | None:
        """The language the window begins in, named stretch by stretch (None when the window is a single
        stretch: its own detection stands), and where another language follows: (frames up to there, the
        encoder output of the window cut there, the next language), or None if it never does.

        Stretches are named in order until the language changes, so a window whose second stretch is in
        another language costs two passes; one `detected` surely in a new language whose first stretch is
        in it too begins in that language and costs one (the change came with the window). The cut is at
        the widest pause before the stretch in the new language (within the stretch before it): people
        change language at a pause, and a stretch is seconds long."""
        hop = self.whisper.hop_length
        starts = [max(seek, x // hop) for x in detection_groups(regions, seek * hop, (seek + frames) * hop)]
        if len(starts) < 2:
            return None
        first: tuple[str, float, object] | None = None
        for i, (start, end) in enumerate(zip(starts, [*starts[1:], seek + frames], strict=True)):
            encoded = self._encode(features, start, end - start, out)
            language, p = self._choose(self._languages(encoded), first[0] if first else preferred)
            if first is None:
                first = (language, p, encoded)
                if language == detected:
                    return language, p, None
            elif language != first[0]:
                pauses = [(b[0] - a[1], b[0] // hop) for a, b in zip(regions, regions[1:], strict=False)
                          if starts[i - 1] < b[0] // hop <= start]
                cut = max(pauses)[1] if pauses else start
                reuse = i == 1 and cut == start  # the first stretch is the cut window
                cut_encoded = first[2] if reuse else self._encode(features, seek, cut - seek, out)
                return first[0], first[1], (cut - seek, cut_encoded, language)
        assert first is not None
        return first[0], first[1], None

    def _decode_batched(self, part: np.ndarray, window: Window, language: str, narrowband: bool = False) -> list:
        """The window's pieces as clips of the batched pipeline, times mapped back to the window's audio."""
        s = self.settings
        clips = [{"start": a / SAMPLE_RATE, "end": b / SAMPLE_RATE} for a, b in window.pieces]
        segments, _ = self.batched.transcribe(
            part, batch_size=s.batch_size, vad_filter=False, clip_timestamps=clips, without_timestamps=False,
            language=language, beam_size=s.beam_size, word_timestamps=True, condition_on_previous_text=False,
            no_speech_threshold=s.no_speech_threshold, log_prob_threshold=s.log_prob_threshold,
            compression_ratio_threshold=s.compression_ratio_threshold,
            temperature=[0.0] if narrowband else FALLBACK_TEMPERATURES,
        )
        # Part times into window times, so that `_segment` maps every path the same way.
        starts, at = [], 0
        for a, b in window.pieces:
            starts.append((a, b, at))
            at += b - a

        def to_window(t: float) -> float:
            x = t * SAMPLE_RATE
            for a, b, w in starts:
                if x <= b:
                    return (w + max(0.0, x - a)) / SAMPLE_RATE
            return at / SAMPLE_RATE

        out = []
        for seg in segments:
            for w in seg.words or []:
                w.start, w.end = to_window(w.start), to_window(w.end)
            seg.start, seg.end = to_window(seg.start), to_window(seg.end)
            out.append(seg)
        return out

    @staticmethod
    def _segment(seg, window: Window, offset: float, language: str | None) -> SpeechSegment:
        """A whisper segment (times in the window's audio) in the file's time, with its language."""

        def at(t: float, piece: int | None = None) -> float:
            return round(window.part_time(float(t), piece) + offset, 3)

        text = seg.text.strip()
        spaced = language not in UNSPACED_LANGUAGES
        words: list[Word] = []
        for w in seg.words or []:
            # Both ends in the piece of the word's middle: a cut-out silence never lies inside a word.
            piece = window.piece_of((float(w.start) + float(w.end)) / 2)
            word = Word(at(w.start, piece), at(w.end, piece), w.word.strip(), float(w.probability))
            if spaced and words and not w.word[:1].isspace():
                # Whisper starts a new word at a punctuation token ("moon", "-palaces"; "100", "%"): a piece with
                # no space before it is written onto the word before, which words are joined with spaces.
                before = words[-1]
                word = Word(before.start, word.end, before.text + word.text, min(before.probability, word.probability))
                words[-1] = word
            else:
                words.append(word)
        return SpeechSegment(
            start=words[0].start if words else at(seg.start), end=words[-1].end if words else at(seg.end),
            text=text, avg_logprob=float(seg.avg_logprob), no_speech_prob=float(seg.no_speech_prob),
            words=tuple(words), compression_ratio=compression_ratio(text), language=language,
        )


def regroup(segments: list[SpeechSegment], max_seconds: float) -> list[SpeechSegment]:
    """Whisper's segments as sentences of at most about `max_seconds` (`mediaindex.models.sentences`)."""
    words = [TimedWord(w.start, w.end, w.text, w.probability, seg.avg_logprob, seg.no_speech_prob, seg.language)
             for seg in segments for w in seg.words if w.text]
    out = [seg for seg in segments if not seg.words and seg.text]  # no word times: kept as they are
    for group in sentences(words, max_seconds):
        text = sentence_text(group)
        out.append(SpeechSegment(
            start=group[0].start, end=group[-1].end, text=text,
            avg_logprob=round(sum(w.avg_logprob for w in group) / len(group), 4),
            no_speech_prob=max(w.no_speech_prob for w in group),
            words=tuple(Word(w.start, w.end, w.text, w.probability) for w in group),
            compression_ratio=compression_ratio(text), language=group[0].language,
        ))
    return sorted(out, key=lambda x: x.start)
