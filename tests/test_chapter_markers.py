"""A file's own chapter markers (an audiobook's, a podcast's, a film's), made at test time with FFmpeg on the
shared recordings: read by the probe, indexed as `marker` moments named by their titles, found by those titles."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mediaindex.index.filters import SearchFilters
from mediaindex.index.store import hit_from_payload
from mediaindex.index.transcript import export
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.media.probe import probe
from mediaindex.pipeline.stages.decode import decode_media
from mediaindex.segments import MARKER, chapter_at
from mediaindex.service.archive import transcribe_now
from tests.conftest import make_settings, media


def _with_chapters(source: Path, out: Path, chapters: list[tuple[int, int, str | None]], *codec: str) -> Path:
    """`source` copied into `out` with these chapters ((start ms, end ms, title or None)), FFmpeg's metadata file."""
    lines = [";FFMETADATA1"]
    for start, end, title in chapters:
        lines += ["[CHAPTER]", "TIMEBASE=1/1000", f"START={start}", f"END={end}"] + ([f"title={title}"] if title else [])
    meta = out.with_suffix(".ffmeta")
    meta.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-i", str(source), "-i", str(meta), "-map", "0",
                    "-map_chapters", "1", *codec, str(out)], check=True)
    return out


JFK_CHAPTERS = [(0, 4000, "Opening words to the nation"), (4000, 8000, "The question"),
                (8000, 30000, "Ask what you can do"), (40000, 50000, "After the end")]


@pytest.mark.parametrize(("name", "codec"), [("book.m4b", ("-c:a", "aac")), ("episode.mp3", ("-c:a", "libmp3lame")),
                                             ("talk.mkv", ("-c:a", "libopus"))])
def test_the_chapters_a_file_marks_are_read_titled_and_held_to_its_length(tmp_path: Path, name: str,
                                                                           codec: tuple[str, ...]) -> None:
    """An audiobook (M4B: its chapters marked twice, as a QuickTime track and in Nero's list), a podcast episode
    (MP3's ID3 chapters) and a Matroska file: each chapter once, with its span, in order; one running past the
    file's end (11 s) is held to it, one after it is left out."""
    book = _with_chapters(media("audio/jfk.flac"), tmp_path / name, JFK_CHAPTERS, *codec)
    chapters = probe(book).chapters
    assert [c["title"] for c in chapters] == ["Opening words to the nation", "The question", "Ask what you can do"]
    assert [(c["start"], c["end"]) for c in chapters[:2]] == [(0.0, 4.0), (4.0, 8.0)]
    assert chapters[2]["start"] == 8.0 and chapters[2]["end"] == pytest.approx(probe(book).duration, abs=0.01)
    assert 10.9 < chapters[2]["end"] < 11.2
    assert probe(media("audio/jfk.flac")).chapters == []


def test_an_untitled_chapter_names_nothing(tmp_path: Path) -> None:
    talk = _with_chapters(media("audio/jfk.flac"), tmp_path / "talk.mkv", [(0, 4000, "Opening"), (4000, 8000, None)],
                          "-c:a", "libopus")
    assert [(c["start"], c["end"], c["title"]) for c in probe(talk).chapters] == [(0.0, 4.0, "Opening")]


def test_markers_are_moments_of_their_own_and_search_finds_them_by_title(tmp_path: Path, cache_dir: Path,
                                                                          embedder) -> None:
    """Indexed in process: each marker a `marker` segment over its chapter, saying its title; a search for a
    title finds its chapter, and the modality filter keeps to markers."""
    from mediaindex.index.index import open_index
    from mediaindex.pipeline.inprocess import InProcessPipeline
    from mediaindex.service import IngestRequest, ingest
    from mediaindex.service.archive import Archive

    book = _with_chapters(media("audio/jfk.flac"), tmp_path / "speech.m4b", JFK_CHAPTERS, "-c:a", "aac")
    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False})
    item = decode_media(str(book), settings)
    markers = [s for s in item.segments if s.modality == MARKER]
    assert [(round(s.start), round(s.end), s.text) for s in markers] == [
        (0, 4, "Opening words to the nation"), (4, 8, "The question"), (8, 11, "Ask what you can do")]
    with open_index(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [book]), index, InProcessPipeline(settings))
        assert len(report.indexed) == 1, [(o.path, o.reason) for o in report.outcomes]
        archive = Archive(settings, index, embedder)
        top = archive.search("the opening words to the nation", limit=1)[0]
        assert (top.modality, top.start, round(top.end), top.text) == (MARKER, 0.0, 4, "Opening words to the nation")
        only = archive.search("what you can do", limit=5, filters=SearchFilters(modality=MARKER), min_confidence="none")
        assert only and {h.modality for h in only} == {MARKER} and only[0].text == "Ask what you can do"
        spoken = archive.search("ask not what your country can do for you", limit=1)[0]
        assert spoken.modality == "speech"  # the words said still come first for what was said
        assert spoken.in_chapter == "Opening words to the nation" and top.in_chapter is None  # where it lies
        said = [hit_from_payload(p, 0.0) for p in index.store.segments_of(spoken.video_id, "speech")]
        assert [h.in_chapter for h in said] == [
            next(title for start, end, title in JFK_CHAPTERS if start <= h.start * 1000 < end) for h in said]
        text = export(index.store.segments_of(spoken.video_id, "speech"), "txt", {})  # `transcript --format txt`
        assert text.startswith("# Opening words to the nation\n")
        assert [line for line in text.splitlines() if line.startswith("# ")] == [
            f"# {title}" for title in dict.fromkeys(h.in_chapter for h in said)]
    # The transcript of a file that is not indexed (`transcript FILE` on a file never ingested) heads them alike.
    fresh = transcribe_now(settings, book)
    assert export(fresh.segments, "txt", {}) == text


def test_a_time_lies_in_the_chapter_that_holds_it() -> None:
    chapters = [{"start": 0.0, "end": 4.0, "title": "A"}, {"start": 4.0, "end": 8.0, "title": "B"}]
    assert [chapter_at(chapters, t) for t in (0.0, 3.99, 4.0, 7.9, 8.0)] == ["A", "A", "B", "B", None]
    assert chapter_at([], 1.0) is None
