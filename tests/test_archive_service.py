"""The service under the faces: one `Archive` (and a `RemoteArchive` with the same calls) that the CLI, the API
and the MCP server call. Opening, the missing-index error, search, transcripts and reset are checked here on the
session's sample archive; the faces' own tests check what they print and answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mediaindex.agents.ask import AgentInputError
from mediaindex.api import create_app
from mediaindex.cli import app as cli_app
from mediaindex.index.filters import SearchFilters
from mediaindex.index.holder import Holder
from mediaindex.index.index import IndexMissingError
from mediaindex.service.archive import Archive, ResetError, index_exists, require_index
from mediaindex.service.remote import Remote, RemoteArchive, RemoteError
from tests.conftest import make_settings, media
from tests.test_api_support import LiveServer, Sample, sample  # noqa: F401  (fixture)

QUERIES = ["ask not what your country can do for you", "an example video"]


def _key(video_id: str, start: float, end: float, modality: str, band: str | None) -> tuple:
    return video_id, round(start, 2), round(end, 2), modality, band


def test_a_missing_index_is_a_clear_error_and_nothing_is_created(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "none", cache_dir)
    assert not Archive.exists(settings) and not index_exists(settings)
    with pytest.raises(IndexMissingError, match=r"no index at .*none: run `mediaindex ingest PATH` first"):
        Archive.open(settings)
    with pytest.raises(IndexMissingError):
        require_index(settings)
    assert not (tmp_path / "none").exists()
    assert not Archive.may_hold(settings, "jfk.flac")
    assert not Archive.anything_to_reset(settings)


@pytest.mark.slow
def test_search_is_the_clis_search(sample: Sample, monkeypatch) -> None:  # noqa: F811
    archive = Archive(sample.settings, sample.index, sample.embedder)
    assert Archive.exists(sample.settings) and archive.through is None
    # The CLI opens its archive through the service: here it is handed the session's (the index stays open).
    monkeypatch.setattr(Archive, "open", classmethod(lambda cls, settings, **how: archive))
    monkeypatch.setattr(Archive, "close", lambda self: None)
    for query in QUERIES:
        here = [_key(h.video_id, h.start, h.end, h.modality, h.band) for h in archive.search(query, limit=5)]
        res = CliRunner().invoke(cli_app, ["search", query, "--json", "--limit", "5", "--index",
                                       str(sample.settings.index_dir)])
        assert res.exit_code == 0, res.output
        cli = [_key(h["video_id"], h["start"], h["end"], h["modality"], h["band"]) for h in json.loads(res.stdout)]
        assert here and here == cli, query


@pytest.mark.slow
def test_reading_calls_answer_from_the_index(sample: Sample) -> None:  # noqa: F811
    archive = Archive(sample.settings, sample.index, sample.embedder)
    stats = archive.stats()
    assert stats["files"] == len(archive.files()) == 2 and stats["speech_segments"] > 0
    record = archive.find("jfk.flac")
    assert record is not None and archive.find(record.video_id[:8]) == record and archive.find("nope.mp4") is None
    found = archive.transcript(record.video_id)
    assert found is not None
    segments, meta = found
    assert meta["video_id"] == record.video_id and "country" in " ".join(s["text"] for s in segments)
    assert archive.transcript("nope.mp4") is None
    # Named as search lists it (no such file where the command runs), or by the start of its id, as clip names it.
    assert Archive.may_hold(sample.settings, "jfk.flac") and archive.transcript("jfk.flac") == found
    assert archive.transcript(record.video_id[:6]) == found and not Archive.may_hold(sample.settings, "nope.mp4")
    assert Archive.may_hold(sample.settings, record.video_id) and Archive.may_hold(sample.settings, record.source)
    assert archive.stored_summary(record.video_id) is None  # the sample was indexed without summaries


@pytest.mark.slow
def test_wrong_inputs_are_clear_errors(sample: Sample) -> None:  # noqa: F811
    archive = Archive(sample.settings, sample.index, sample.embedder)
    with pytest.raises(ValueError, match="empty"):
        archive.search("   ")
    with pytest.raises(ValueError, match="unknown modality"):
        archive.search("country", filters=SearchFilters(modality="smell"))
    with pytest.raises(ValueError):
        archive.search("country", min_confidence="certain")
    with pytest.raises(AgentInputError, match="no video given"):
        archive.summarize("  ")
    with pytest.raises(AgentInputError, match="the question is empty"):
        archive.ask(" ")
    # The index is open in this process: a reset is refused, naming who holds it, and deletes nothing.
    with pytest.raises(ResetError, match="is held by .*stop it first"):
        Archive.reset(sample.settings)
    assert Archive.exists(sample.settings)


@pytest.mark.slow
def test_a_remote_archive_answers_as_the_local_one(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    local = Archive(sample.settings, sample.index, sample.embedder)
    app = create_app(sample.app_settings(tmp_path), index=sample.index, embedder=sample.embedder,
                     pipeline=sample.pipeline)
    with LiveServer(app) as server:
        remote = RemoteArchive(Remote(Holder(pid=0, command="mediaindex serve", url=server.url)))
        for query in QUERIES:
            here = [_key(h.video_id, h.start, h.end, h.modality, h.band) for h in local.search(query, limit=5)]
            there = [_key(h["video_id"], h["start"], h["end"], h["modality"], h["band"])
                     for h in remote.search(query, limit=5)]
            assert here and here == there, query
        for query in QUERIES:  # by file: the same files, counts and moments
            here_files = [(f["video_id"], f["count"], [m["start"] for m in f["moments"]])
                          for f in local.file_moments(query, limit=3, per_file=2, min_confidence="none")]
            there_files = [(f["video_id"], f["count"], [m["start"] for m in f["moments"]])
                           for f in remote.file_moments(query, limit=3, per_file=2, min_confidence="none")]
            assert here_files and here_files == there_files, query
        vid = local.find("auto-editor_example.mp4").video_id  # type: ignore[union-attr]
        shot = next(s for s in local.segments(vid, "visual") if s["start"] <= 3.0 <= s["end"])
        liked = local.like(vid, 3.0, 50, min_confidence="none")
        assert all((h.video_id, h.start, h.end) != (vid, shot["start"], shot["end"]) for h in liked)
        narrowed = remote.search(QUERIES[0], limit=5, filters=SearchFilters(modality="ocr"))
        assert all(h["modality"] == "ocr" for h in narrowed)
        record = local.find("jfk.flac")
        assert record is not None and remote.video_id("jfk.flac") == record.video_id
        # What the server does not take is refused with what it takes; an unknown video names itself.
        timed = SearchFilters(source_prefix=str(media("audio")), start=4.0, end=9.0)
        here = [(h.video_id, h.start, h.end) for h in local.search(QUERIES[0], limit=5, filters=timed)]
        assert here and here == [(h["video_id"], h["start"], h["end"])
                                 for h in remote.search(QUERIES[0], limit=5, filters=timed)]
        with pytest.raises(RemoteError, match="through it, search takes a text query"):
            remote.search("country", filters=SearchFilters(modality=("speech", "ocr")))
        with pytest.raises(RemoteError, match="through it, search takes"):
            remote.search("country", mode="sparse")
        with pytest.raises(RemoteError, match="no video 'nope.mp4' in the index"):
            remote.summarize("nope.mp4")
    # A server that is gone: the error says so, no traceback.
    gone = RemoteArchive(Remote(Holder(pid=0, command="mediaindex serve", url=server.url), timeout=2))
    with pytest.raises(RemoteError, match="does not answer"):
        gone.search("country")
