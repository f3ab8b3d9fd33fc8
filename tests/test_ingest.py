"""End to end over real media: ingest into a temporary index on Ray, then search it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from mediaindex.index.index import MediaIndex
from mediaindex.search.searcher import search
from mediaindex.service import IngestHooks, IngestReport, IngestRequest, Pipeline, ingest
from tests.conftest import SAMPLE_ARCHIVE, make_settings, media

pytestmark = pytest.mark.slow

SAMPLES = SAMPLE_ARCHIVE


@pytest.fixture(scope="session")
def ingested(sample_archive: tuple[MediaIndex, IngestReport]) -> tuple[MediaIndex, IngestReport]:
    return sample_archive


def _overlaps(hit, start: float, end: float) -> bool:
    return hit.start < end and hit.end > start


def test_every_sample_is_indexed(ingested) -> None:
    _, report = ingested
    assert {Path(o.path).name for o in report.indexed} == {Path(s).name for s in SAMPLES}
    no_audio = next(o for o in report.outcomes if o.path.endswith("testvideo.mp4"))
    assert "no audio track" in "; ".join(no_audio.notes)


@pytest.mark.parametrize(
    ("query", "file", "start", "end"),
    [
        ("ask not what your country can do for you", "jfk.flac", 3.0, 8.0),
        ("communism is already acknowledged by all European powers to be itself a power", "manifesto.mp4", 50.0, 60.0),
        ("an example video for your convenience and pleasure", "auto-editor_example.mp4", 0.0, 10.0),
    ],
)
def test_spoken_words_find_the_file_and_moment(ingested, embedder, query: str, file: str, start: float, end: float) -> None:
    index, _ = ingested
    hits = search(index, embedder, query, limit=3)
    assert Path(hits[0].source).name == file
    assert Path(hits[0].source).is_absolute()
    assert _overlaps(hits[0], start, end)
    assert hits[0].modality == "speech" and hits[0].text


@pytest.mark.parametrize(
    "query",
    [
        "Fragt nicht, was euer Land für euch tun kann",  # German
        "조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오",  # Korean
    ],
)
def test_other_languages_find_english_speech(ingested, embedder, query: str) -> None:
    index, _ = ingested
    hits = search(index, embedder, query, limit=3)
    assert Path(hits[0].source).name == "jfk.flac"


def test_reingest_is_a_no_op_and_changed_file_is_reindexed(tmp_path: Path, pipeline: Pipeline, embedder,
                                                           cache_dir: Path, copy_media) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    clip = copy_media("audio/jfk.flac", "speech clip.flac")
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        first = ingest(IngestRequest(settings, [clip.parent]), index, pipeline)
        assert len(first.indexed) == 1
        count = index.store.count()
        again = ingest(IngestRequest(settings, [clip]), index, pipeline)
        assert [o.status for o in again.outcomes] == ["unchanged"]
        assert index.store.count() == count
        os.utime(clip, ns=(1, 1))  # touched but identical bytes: still unchanged
        touched = ingest(IngestRequest(settings, [clip]), index, pipeline)
        assert [o.status for o in touched.outcomes] == ["unchanged"]
        shutil.copy(media("audio/english.wav"), clip)  # new content under the same name
        changed = ingest(IngestRequest(settings, [clip]), index, pipeline)
        assert [o.status for o in changed.outcomes] == ["indexed"]
        hits = search(index, embedder, "one two three", limit=5)
        assert all(h.source == str(clip) for h in hits)
        assert not any("fellow Americans" in h.text for h in hits)  # old content is gone
        assert len(index.catalog.all()) == 1


def test_bad_inputs_fail_alone_and_lose_nothing(tmp_path: Path, pipeline: Pipeline, embedder, cache_dir: Path,
                                                copy_media) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    good = copy_media("audio/jfk.flac")
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        ingest(IngestRequest(settings, [good]), index, pipeline)
        before = index.store.count()

        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "notes.mp4").write_text("this is a text file, not a video\n")
        (bad / "empty.mp4").write_bytes(b"")
        whole = media("video/manifesto.mp4").read_bytes()
        (bad / "truncated.mp4").write_bytes(whole[: len(whole) // 2])
        shutil.copy(media("video/goldeneye-vfr-drop3.mp4"), bad / "no audio.mp4")
        shutil.copy(media("audio/english.wav"), bad / "ünïcode name.wav")
        report = ingest(IngestRequest(settings, [bad, tmp_path / "missing.mp4"]), index, pipeline)

        reasons = {Path(o.path).name: (o.status, o.reason, o.notes) for o in report.outcomes}
        assert reasons["missing.mp4"][:2] == ("skipped", "file not found")
        assert reasons["notes.mp4"][0] == "failed" and "not a readable media file" in reasons["notes.mp4"][1]
        assert reasons["empty.mp4"][0] == "failed" and "empty file" in reasons["empty.mp4"][1]
        assert reasons["truncated.mp4"][0] in {"failed", "indexed"}  # a readable prefix may be indexed
        assert reasons["no audio.mp4"][0] == "indexed" and "no audio track" in "; ".join(reasons["no audio.mp4"][2])
        assert reasons["ünïcode name.wav"][0] == "indexed"
        # What was indexed before is intact.
        assert index.store.count() >= before + 1
        hits = search(index, embedder, "ask not what your country can do for you", limit=1)
        assert Path(hits[0].source).name == "jfk.flac"


def test_speech_starts_with_the_decode_not_after_it(tmp_path: Path, pipeline: Pipeline, embedder,
                                                   cache_dir: Path) -> None:
    """Speech reads the file itself: it is sent with the decode, and its transcript joins the decoded (and
    looked at) pictures before the embedding."""
    settings = make_settings(tmp_path / "index", cache_dir)
    clip = media("video/auto-editor_example.mp4")  # 42 s of 720p: its decode takes a while
    sent: dict[str, float] = {}
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [clip]), index, pipeline,
                        IngestHooks(on_dispatch=lambda stage, _: sent.setdefault(stage, time.monotonic())))
        assert [o.status for o in report.outcomes] == ["indexed"]
        speech = index.store.segments_of(report.outcomes[0].video_id, modality="speech")
    # Sent in the same round, before any result came back (one round waits up to 0.5 s for results).
    assert abs(sent["speech"] - sent["decode"]) < 0.4
    assert sent["vision"] - sent["decode"] > 0.4  # vision did wait for the decoded pictures
    assert sent["embed"] > sent["vision"]
    # The joined transcript carries the decoded file's id and the thumbnail of the shot it falls in.
    assert speech and all(s["video_id"] == report.outcomes[0].video_id and s["thumbnail"] for s in speech)
