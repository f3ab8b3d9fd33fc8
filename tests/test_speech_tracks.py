"""Files with several audio tracks (made at test time from the shared clips): each track is transcribed, the
default one first; another track's sentences are named by their track, a sentence the default track said too is
kept once, and a file's transcript reads its default track."""

from __future__ import annotations

import copy
import io
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import av
import pytest

from mediaindex.config import ApiSettings, Settings
from mediaindex.errors import ConfigError, MediaError, MediaIndexError
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.media.probe import audio_track_index, probe, track_order
from mediaindex.pipeline.stages.speech import SpeechStage
from mediaindex.segments import TRACK_FIELD
from tests.conftest import make_settings, media

JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-zàâçéèêëîïôûùüÿœ' ]", " ", text.lower()).split())


def _sound_seconds(mp4: bytes) -> float:
    """How long the sound of a played copy (fragmented MP4) lasts."""
    with av.open(io.BytesIO(mp4)) as played:
        return sum(float(frame.samples) / frame.sample_rate for frame in played.decode(audio=0))


def _mux(out: Path, tracks: list[tuple[str, str | None, str | None]], default: int, picture: str | None = None) -> Path:
    """One file holding each clip as an audio track, tagged with its language and title; `default` marked; with
    `picture`, that video's picture stream too (copied)."""
    cmd = [ffmpeg_exe(), "-v", "error", "-y"]
    for rel, _, _ in tracks:
        cmd += ["-i", str(media(rel))]
    if picture:
        cmd += ["-i", str(media(picture)), "-map", f"{len(tracks)}:v", "-c:v", "copy"]
    for n, (_, language, title) in enumerate(tracks):
        cmd += ["-map", f"{n}:a", f"-disposition:a:{n}", "default" if n == default else "0"]
        if language:
            cmd += [f"-metadata:s:a:{n}", f"language={language}"]
        if title:
            cmd += [f"-metadata:s:a:{n}", f"title={title}"]
    subprocess.run([*cmd, "-c:a", "aac", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def dub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An English original as the first track, a French version (another clip) as the default second one."""
    return _mux(tmp_path_factory.mktemp("tracks") / "dubbed film.mkv",
                [("audio/jfk.flac", "eng", None), ("audio/french.aiff", "fra", "Version française")], default=1)


@pytest.fixture(scope="module")
def stage(session_settings: Settings) -> SpeechStage:
    return SpeechStage(session_settings)


def test_each_audio_track_is_listed_and_the_default_comes_first(dub: Path) -> None:
    info = probe(dub)
    assert info.audio_streams == 2
    assert [(t["language"], t["title"], t["default"]) for t in info.audio_tracks] == [
        ("en", None, False), ("fr", "Version française", True)]
    lengths = [probe(media(rel)).duration for rel in ("audio/jfk.flac", "audio/french.aiff")]
    assert [t["duration"] for t in info.audio_tracks] == pytest.approx(lengths, abs=0.1)
    assert track_order(info.audio_tracks) == [1, 0]
    assert info.sample_rate == info.audio_tracks[1]["sample_rate"]  # the file's audio is its default track's
    assert track_order([{"default": False}, {"default": False}]) == [0, 1]  # none marked: the file's order
    assert track_order([]) == []


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_each_track_is_transcribed_and_the_others_are_named(stage: SpeechStage, dub: Path) -> None:
    result = stage.transcribe_file(str(dub), probe(dub))
    default = [s for s in result.segments if TRACK_FIELD not in s.extra]
    other = [s for s in result.segments if TRACK_FIELD in s.extra]
    assert "dictée" in _words(" ".join(s.text for s in default))
    assert _words(" ".join(s.text for s in other)) == JFK
    assert {s.extra[TRACK_FIELD] for s in other} == {"audio 1 (en)"}
    assert {s.language for s in other} == {"en"} and result.language == "fr"  # the file's: its default track's
    assert result.notes == ["2 audio tracks: each transcribed"]  # no track "ends early": each has its length
    assert [s.start for s in result.segments] == sorted(s.start for s in result.segments)
    # Each track's voices are told apart; another track's are numbered after the default track's.
    assert {s.speaker for s in default} == {"S1"} and {s.speaker for s in other} == {"S2"}


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_two_voices_on_another_track_are_two_speakers_numbered_after_the_default_tracks(
        stage: SpeechStage, tmp_path: Path) -> None:
    # A commentary: two people in turn (a LibriSpeech reader, then Kennedy) beside a French reading.
    talk = tmp_path / "two voices.wav"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("audio/2412-153948-0000.flac")), "-i",
                    str(media("audio/jfk.flac")), "-filter_complex",
                    "[0:a]aresample=16000,apad=pad_dur=2[a];[1:a]aresample=16000,pan=mono|c0=c0[b];"
                    "[a][b]concat=n=2:v=0:a=1", "-ac", "1", str(talk)], check=True)
    both = _mux(tmp_path / "with commentary.mkv",
                [("audio/french.aiff", "fra", None), (str(talk), "eng", "Commentary")], default=0)
    result = stage.transcribe_file(str(both), probe(both))
    default = [s for s in result.segments if TRACK_FIELD not in s.extra]
    other = [s for s in result.segments if TRACK_FIELD in s.extra]
    assert "dictée" in _words(" ".join(s.text for s in default)) and {s.speaker for s in default} == {"S1"}
    assert other and {s.extra[TRACK_FIELD] for s in other} == {"audio 2 (en, Commentary)"}
    reader = probe(media("audio/2412-153948-0000.flac")).duration
    assert {s.speaker for s in other if s.end <= reader + 1} == {"S2"}
    assert {s.speaker for s in other if s.start >= reader + 1} == {"S3"}
    # Whisper can drop Kennedy's opening "And" after the reader (it does on some CPUs: their numerics differ).
    assert JFK.removeprefix("and ") in _words(" ".join(s.text for s in other if s.start >= reader + 1))


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_a_track_saying_the_default_again_is_kept_once_and_the_count_is_a_setting(
        stage: SpeechStage, tmp_path: Path) -> None:
    # An audio-described copy mixed over the original says the original's sentences again.
    twice = _mux(tmp_path / "described.mp4", [("audio/jfk.flac", None, None), ("audio/jfk.flac", None, "AD")], 0)
    result = stage.transcribe_file(str(twice), probe(twice))
    assert len(result.segments) == 1 and _words(result.segments[0].text) == JFK
    assert not any(TRACK_FIELD in s.extra for s in result.segments)

    three = _mux(tmp_path / "three.mka", [("audio/jfk.flac", "eng", None), ("audio/french.aiff", "fra", None),
                                          ("audio/LJ002-0020.wav", "eng", "Commentary")], 0)
    first = copy.copy(stage)  # the loaded models, another setting
    first.settings = stage.settings.model_copy(update={"speech": stage.settings.speech.model_copy(
        update={"audio_tracks": 1})})
    result = first.transcribe_file(str(three), probe(three))
    assert _words(" ".join(s.text for s in result.segments)) == JFK
    assert result.notes == ["3 audio tracks: 1 transcribed (speech.audio_tracks)"]
    with pytest.raises(ConfigError, match="speech.audio_tracks: Input should be greater than or equal to 1"):
        make_settings(tmp_path / "idx", tmp_path, speech={"audio_tracks": 0})


@pytest.mark.slow
def test_an_indexed_dub_is_found_in_each_language_and_read_in_its_default_one(
        dub: Path, tmp_path: Path, cache_dir: Path, embedder) -> None:
    from fastapi.testclient import TestClient

    from mediaindex.api.app import create_app
    from mediaindex.index.index import open_index
    from mediaindex.mcp.tools import moment
    from mediaindex.pipeline.inprocess import InProcessPipeline
    from mediaindex.pipeline.plan import EARLIER_ANALYSIS
    from mediaindex.segments import ANALYSIS_VERSION
    from mediaindex.service import IngestRequest, ingest
    from mediaindex.service.archive import Archive, transcribe_now

    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False})
    with open_index(settings, embedder.dim, embedder.name, thread_safe=True) as index:  # served below too
        report = ingest(IngestRequest(settings, [dub]), index, InProcessPipeline(settings))
        (done,) = report.indexed
        assert "2 audio tracks: each transcribed" in done.notes
        archive = Archive(settings, index, embedder)
        top = archive.search("ask not what your country can do for you", limit=1)[0]
        assert (top.track, top.modality, top.language) == ("audio 1 (en)", "speech", "en")
        with TestClient(create_app(settings, index=index, embedder=embedder)) as client:
            (hit,) = client.get("/search", params={"q": "ask not what your country", "limit": 1}).json()["hits"]
            assert hit["track"] == "audio 1 (en)"
            assert moment(client.app.state.api, top, "ask not", None).track == "audio 1 (en)"  # the MCP tools' own
            said = client.get(f"/videos/{done.video_id}/transcript", params={"format": "txt"}).text
            assert "dictée" in said and "country" not in said
        found = archive.transcript("dubbed film.mkv")
        assert found is not None and "dictée" in _words(" ".join(s["text"] for s in found[0]))
        assert not any("country" in s["text"] for s in found[0])  # the other track is not read into it

        # Indexed when only the first track was transcribed (no tracks in its probe): told, as an earlier
        # version's file is, and indexed again with --reindex.
        record = index.catalog.get(done.video_id)
        assert record is not None and not record.by_earlier_analysis()
        index.catalog.upsert(replace(record, probe={k: v for k, v in record.probe.items() if k != "audio_tracks"}))
        assert index.catalog.earlier_analysis(ANALYSIS_VERSION) == 1
        (again,) = ingest(IngestRequest(settings, [dub]), index, InProcessPipeline(settings)).outcomes
        assert again.reason == EARLIER_ANALYSIS
        index.catalog.upsert(record)
        # Another track's transcript by its number, as players count them: the library, the API.
        english, _ = archive.transcript("dubbed film.mkv", track=1) or ([], {})
        assert _words(" ".join(s["text"] for s in english)) == JFK
        # Whether a track was transcribed is what the file was indexed with, not the setting in force now.
        assert index.catalog.get(done.video_id).probe["transcribed_tracks"] == 2  # type: ignore[union-attr]
        lowered = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False}, speech={"audio_tracks": 1})
        assert Archive(lowered, index, embedder).transcript("dubbed film.mkv", track=1) == (english, _)
        assert archive.transcript("dubbed film.mkv", track=2) == found
        with pytest.raises(MediaIndexError, match="it has 2 audio tracks: a track is a number from 1 to 2"):
            archive.transcript("dubbed film.mkv", track=3)
        served = settings.model_copy(update={"api": ApiSettings(media_roots=[dub.parent], rate_limit_per_minute=0,
                                                                keys_db=tmp_path / "keys.db")})
        with TestClient(create_app(served, index=index, embedder=embedder)) as client:
            url = f"/videos/{done.video_id}/transcript"
            assert "country" in client.get(url, params={"format": "txt", "track": 1}).text
            lines = client.get(url, params={"track": 1}).json()
            assert _words(" ".join(line["text"] for line in lines)) == JFK
            refused = client.get(url, params={"track": 3})
            assert refused.status_code == 422 and "from 1 to 2" in refused.json()["message"]
            assert client.get(url, params={"track": 0}).status_code == 422
            # Played: the default track (the French clip, 2.5 s), or the track a moment was heard on (the
            # English one, 11 s): browsers play the default one alone.
            play = f"/media/{done.video_id}/playable"
            played = {n: client.get(play, params={"track": n} if n else {}) for n in (None, 1, 2)}
            assert all(r.status_code == 200 for r in played.values()), [r.text for r in played.values()]
            heard = {n: _sound_seconds(r.content) for n, r in played.items()}
            assert heard[None] == heard[2] == pytest.approx(2.53, abs=0.1) and heard[1] == pytest.approx(11.0, abs=0.1)
            lacking_track = client.get(play, params={"track": 3})
            assert lacking_track.status_code == 422 and "from 1 to 2" in lacking_track.json()["message"]
            # A moment saved as a clip keeps the sound it was heard in, as the command cuts it.
            cut = {n: client.get(f"/media/{done.video_id}/clip", params={"start": 0, "end": 11, **({"track": n} if n else {})})
                   for n in (None, 1)}
            assert all(r.status_code == 200 for r in cut.values()), [r.text for r in cut.values()]
            assert _sound_seconds(cut[None].content) == pytest.approx(2.53, abs=0.1)
            assert _sound_seconds(cut[1].content) == pytest.approx(11.0, abs=0.1)

    fresh = transcribe_now(settings, dub)  # a file never indexed: its default track alone is transcribed
    assert "dictée" in _words(" ".join(s["text"] for s in fresh.segments))
    assert not any("country" in s["text"] for s in fresh.segments)
    assert _words(" ".join(s["text"] for s in transcribe_now(settings, dub, track=1).segments)) == JFK
    with pytest.raises(MediaError, match="it has 2 audio tracks"):
        transcribe_now(settings, dub, track=3)

    # The command: an indexed file's other track, and a track it lacks refused by name.
    from typer.testing import CliRunner

    from mediaindex.cli import app

    said = CliRunner().invoke(app, ["transcript", "dubbed film.mkv", "-f", "txt", "--track", "1",
                                    "--index", str(settings.index_dir)])
    # Its voice is numbered after the default track's (S1, the French reader).
    assert said.exit_code == 0 and said.stdout.startswith("S2: ") and _words(said.stdout[4:]) == JFK
    lacking = CliRunner().invoke(app, ["transcript", str(dub), "--track", "5", "--index", str(settings.index_dir)])
    assert lacking.exit_code != 0 and "it has 2 audio tracks: a track is a number from 1 to 2" in lacking.stderr
    zero = CliRunner().invoke(app, ["transcript", str(dub), "--track", "0", "--index", str(settings.index_dir)])
    assert zero.exit_code == 2 and "--track" in zero.stderr
    english_clip = tmp_path / "english.m4a"
    cut = CliRunner().invoke(app, ["clip", str(dub), "0", "11", "--track", "1", "-o", str(english_clip)])
    assert cut.exit_code == 0, cut.stderr
    assert _sound_seconds(english_clip.read_bytes()) == pytest.approx(11.0, abs=0.1)
    lacking = CliRunner().invoke(app, ["clip", str(dub), "0", "2", "--track", "3", "-o", str(tmp_path / "x.m4a")])
    assert lacking.exit_code != 0 and "dubbed film.mkv: it has 2 audio tracks" in lacking.stderr
    assert not (tmp_path / "x.m4a").exists()


def test_a_track_number_names_a_stream_the_file_has_and_that_was_transcribed() -> None:
    tracks = [{"default": False}, {"default": True}, {"default": False}]  # transcribed in the order 2, 1, 3
    assert [audio_track_index(tracks, n, 3) for n in (1, 2, 3)] == [0, 1, 2]
    assert audio_track_index(tracks, 2, 1) == 1  # the default track is transcribed first
    with pytest.raises(ValueError, match=r"its audio track 3 was not transcribed \(speech.audio_tracks was 2 when"):
        audio_track_index(tracks, 3, 2)
    with pytest.raises(ValueError, match="a track is a number from 1 to 3"):
        audio_track_index(tracks, 4, 3)
    with pytest.raises(ValueError, match="it has one audio track: the only track is 1"):
        audio_track_index([], 2, 4)  # a file probed before its tracks were listed has one


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_audio_that_starts_after_the_file_keeps_its_place_in_time(stage: SpeechStage, tmp_path: Path) -> None:
    """Raw PCM carries no timestamps: audio muxed in 5 s after the picture starts was read as if it began at 0 s,
    and every moment of it played 5 s early."""
    import numpy as np

    from mediaindex.media.decode import AudioStream

    late = tmp_path / "late audio.mp4"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("video/cockatoo.mp4")), "-itsoffset", "5",
                    "-i", str(media("audio/jfk.flac")), "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac",
                    str(late)], check=True)
    samples = np.concatenate(list(AudioStream(late)))
    assert not samples[: 16_000 * 4].any() and np.abs(samples[16_000 * 5 : 16_000 * 7]).max() > 0.1
    result = stage.transcribe_file(str(late), probe(late))
    assert _words(result.segments[0].text).startswith("and so my fellow americans")
    assert 5.0 < result.segments[0].start < 5.6  # jfk.flac's first word is at about 0.3 s of its own
