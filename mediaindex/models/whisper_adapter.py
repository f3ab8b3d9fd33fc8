"""faster-whisper's non-public parts that the speech model relies on, all behind this one module.

`speech.SpeechModel` runs Whisper's seek loop itself (one window per stretch of speech, the language named from each
window's own encoder pass) the way faster-whisper's `WhisperModel.generate_segments` does, so it needs pieces of
faster-whisper that are not its public API and may change in any release. Nothing else in the package touches them;
`tests/test_whisper_contract.py` compares their signatures with what is used here and fails naming the one that
changed. What this module relies on (as of faster-whisper 1.2.1):

- `faster_whisper.vad.get_speech_timestamps(audio, vad_options)` with `VadOptions(threshold, max_speech_duration_s,
  min_silence_duration_ms, speech_pad_ms)`: Silero VAD regions, dicts of "start" and "end" samples;
- `faster_whisper.audio.pad_or_trim(features)`: a window's features padded (or cut) to 30 s;
- `faster_whisper.tokenizer.Tokenizer(tokenizer, multilingual, task, language)`, its `timestamp_begin` and
  `decode(tokens)`;
- `faster_whisper.transcribe.Segment` and `Word`, built by field name from the loop's segment dicts;
- `WhisperModel.encode(features)`;
- `WhisperModel.get_prompt(tokenizer, previous_tokens, without_timestamps)`;
- `WhisperModel.generate_with_fallback(encoder_output, prompt, tokenizer, options)` -> (CTranslate2 result with
  `sequences_ids` and `no_speech_prob`, average log-probability, temperature, compression ratio);
- `WhisperModel._split_segments_by_timestamps(tokenizer, tokens, time_offset, segment_size, segment_duration, seek)`
  -> (segment dicts with "seek", "start", "end", "tokens"; the next seek; whether the text ends on a single
  timestamp);
- `WhisperModel.add_word_timestamps(segments, tokenizer, encoder_output, num_frames, prepend_punctuations,
  append_punctuations, last_speech_timestamp)`, given a list of lists of segment dicts: fills each one's "words"
  (dicts of `Word`'s fields);
- `WhisperModel` attributes: `feature_extractor` (called on audio; `nb_max_frames`, `hop_length`,
  `time_per_frame`), `hf_tokenizer`, `time_precision`, `frames_per_second`, and `model`, CTranslate2's Whisper
  (`is_multilingual`, `detect_language(encoder_output)` -> per batch item, ("<|xx|>", probability) pairs, best first);
- `TranscriptionInfo.transcription_options` (`without_timestamps`, `log_prob_threshold`, `no_speech_threshold`,
  `prepend_punctuations`, `append_punctuations`): faster-whisper's own decoding options, taken from a `transcribe` call
  over a tenth of a second of silence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from faster_whisper.transcribe import Segment, TranscriptionOptions

_BLANK_SAMPLES = 1_600  # a tenth of a second at Whisper's 16 kHz


def vad_regions(audio: np.ndarray, **options: float) -> list[tuple[int, int]]:
    """(start, end) samples of each stretch of speech the bundled Silero VAD finds in 16 kHz audio; `options` are
    `VadOptions` fields (threshold, max_speech_duration_s, min_silence_duration_ms, speech_pad_ms)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    return [(int(r["start"]), int(r["end"])) for r in get_speech_timestamps(audio, VadOptions(**options))]


class WhisperInternals:
    """One loaded `WhisperModel`, driven window by window: features, an encoder pass, the languages it names, and
    one pass of the seek loop's decoding with word timestamps."""

    def __init__(self, model: WhisperModel) -> None:
        self.model = model
        extractor = model.feature_extractor
        self.max_frames: int = extractor.nb_max_frames  # feature frames in Whisper's 30 s window
        self.hop_length: int = extractor.hop_length  # samples per feature frame
        self.seconds_per_frame: float = extractor.time_per_frame
        self.multilingual = bool(model.model.is_multilingual)

    def features(self, audio: np.ndarray) -> np.ndarray:
        """Log-mel features of 16 kHz audio, [mels, frames]."""
        return self.model.feature_extractor(audio)

    def encode(self, features: np.ndarray, start: int, frames: int) -> Any:
        """The encoder output of `frames` feature frames from `start` (at most 30 s, padded to 30 s)."""
        from faster_whisper.audio import pad_or_trim

        return self.model.encode(pad_or_trim(features[:, start:start + frames]))

    def languages(self, encoder_output: Any) -> list[tuple[str, float]]:
        """(language code, probability) for the encoded window, most likely first."""
        return [(token[2:-2], float(p)) for token, p in self.model.model.detect_language(encoder_output)[0]]

    def decoding_options(self, **transcribe_options: Any) -> TranscriptionOptions:
        """faster-whisper's decoding options as its own `transcribe` builds them from these keyword arguments (this
        runs the feature extractor over a padded 30 s: build them once per settings)."""
        _, info = self.model.transcribe(np.zeros(_BLANK_SAMPLES, dtype=np.float32), **transcribe_options)
        return info.transcription_options

    def decode_window(self, encoder_output: Any, seek: int, frames: int, language: str, options: TranscriptionOptions,
                      last_word_end: float, last: bool = False) -> tuple[list[Segment], int, float]:
        """One pass of the seek loop (`generate_segments`, without a prompt: text is not conditioned on the window
        before) over the encoded window of `frames` frames starting at frame `seek`: its segments (times in seconds
        of the features' audio), the frame the next window starts at, and the end of the last word. A `last` window
        keeps the unfinished segment whisper would otherwise decode again in the next window."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import Segment
        from faster_whisper.transcribe import Word as WhisperWord

        model = self.model
        tokenizer = Tokenizer(model.hf_tokenizer, self.multilingual, task="transcribe", language=language)
        prompt = model.get_prompt(tokenizer, [], without_timestamps=options.without_timestamps)
        result, avg_logprob, temperature, ratio = model.generate_with_fallback(encoder_output, prompt, tokenizer,
                                                                               options)
        confident = options.log_prob_threshold is not None and avg_logprob > options.log_prob_threshold
        if (options.no_speech_threshold is not None and result.no_speech_prob > options.no_speech_threshold
                and not confident):
            return [], seek + frames, last_word_end  # no speech in this window
        time_offset = seek * self.seconds_per_frame
        current, next_seek, single_ending = model._split_segments_by_timestamps(
            tokenizer=tokenizer, tokens=result.sequences_ids[0], time_offset=time_offset, segment_size=frames,
            segment_duration=frames * self.seconds_per_frame, seek=seek)
        tokens = result.sequences_ids[0]
        unfinished = tokens[sum(len(seg["tokens"]) for seg in current):]
        if last and not single_ending and len(unfinished) > 1 and unfinished[0] >= tokenizer.timestamp_begin:
            start = time_offset + (unfinished[0] - tokenizer.timestamp_begin) * model.time_precision
            end = time_offset + frames * self.seconds_per_frame
            current.append({"seek": seek, "start": start, "end": end, "tokens": unfinished})
            next_seek = seek + frames
        model.add_word_timestamps([current], tokenizer, encoder_output, frames, options.prepend_punctuations,
                                  options.append_punctuations, last_speech_timestamp=last_word_end)
        ends = [w["end"] for seg in current for w in seg["words"]]
        if ends:
            last_word_end = ends[-1]
            if not single_ending and not last and last_word_end > time_offset:
                next_seek = round(last_word_end * model.frames_per_second)
        segments: list[Segment] = []
        for seg in current:
            text = tokenizer.decode(seg["tokens"])
            if seg["start"] == seg["end"] or not text.strip():
                continue
            segments.append(Segment(
                id=len(segments) + 1, seek=seek, start=seg["start"], end=seg["end"], text=text,
                tokens=seg["tokens"], avg_logprob=avg_logprob, compression_ratio=ratio,
                no_speech_prob=result.no_speech_prob, temperature=temperature,
                words=[WhisperWord(**w) for w in seg["words"]]))
        return segments, next_seek, last_word_end
