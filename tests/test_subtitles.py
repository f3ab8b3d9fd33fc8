"""Subtitles read with their media: files beside it and its own text streams, over the real captions of
manifesto.mp4 (an SRT and YouTube's rolling WebVTT of the same captions); broken and legacy-encoded files are
made at test time."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from mediaindex.index.index import MediaIndex
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.media.subtitles import (
    MAX_FILE_BYTES,
    MAX_PASSAGE_CHARS,
    MAX_PASSAGE_SECONDS,
    language_code,
    passages,
    read_subtitles,
    subtitle_files,
)
from mediaindex.pipeline.discover import discover
from mediaindex.pipeline.inprocess import InProcessPipeline
from mediaindex.search.searcher import search
from mediaindex.segments import SUBTITLE, TRACK_FIELD, standing_for_speech
from mediaindex.service import IngestRequest, ingest
from mediaindex.service.archive import Archive
from tests.conftest import make_settings, media

SRT = "groundtruth/manifesto.srt"
VTT = "groundtruth/manifesto.vtt"  # YouTube's automatic captions: each line shown again under the next


def _srt_cues(text: str) -> list[tuple[float, str]]:
    """(start, text) of each cue of an SRT file, parsed here independently of the reader."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.strip().splitlines()
        h, m, rest = lines[1].split(" --> ")[0].split(":")
        s, ms = rest.split(",")
        out.append((int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000, " ".join(lines[2:]).strip()))
    return out


@pytest.fixture
def talk(tmp_path: Path) -> Path:
    """manifesto.mp4 as talk.mp4, alone in a folder."""
    folder = tmp_path / "talks"
    folder.mkdir()
    shutil.copy(media("video/manifesto.mp4"), folder / "talk.mp4")
    return folder / "talk.mp4"


def test_rolling_captions_keep_each_line_once(talk: Path) -> None:
    shutil.copy(media(VTT), talk.with_name("talk.en.vtt"))
    found = read_subtitles(talk)
    assert found.notes == []
    (track,) = found.tracks
    assert (track.origin, track.language) == ("talk.en.vtt", "en")
    expected = _srt_cues(media(SRT).read_text(encoding="utf-8"))
    assert [c.text for c in track.cues] == [text for _, text in expected]  # the same captions as the SRT's
    assert all(abs(c.start - start) < 0.02 for c, (start, _) in zip(track.cues, expected, strict=True))
    assert track.cues[0].text == "this audiobook is in the public domain"
    assert all(c.end >= c.start for c in track.cues)


def test_an_srt_beside_the_file_and_its_language_from_the_name(talk: Path) -> None:
    shutil.copy(media(SRT), talk.with_name("talk.srt"))
    shutil.copy(media(SRT), talk.with_name("TALK.eng.forced.srt"))  # a language, then a flag; case differs
    shutil.copy(media(SRT), talk.with_name("talks.srt"))  # another file's
    shutil.copy(media(SRT), talk.with_name("talk.mp4.notes.txt"))
    assert [p.name for p in subtitle_files(talk)] == ["TALK.eng.forced.srt", "talk.srt"]
    tracks = read_subtitles(talk).tracks
    assert [(t.origin, t.language) for t in tracks] == [("TALK.eng.forced.srt", "en"), ("talk.srt", None)]
    assert tracks[1].cues[3].text == "workers of the world unite"
    assert tracks[1].cues[3].start == pytest.approx(9.519)


def test_subtitles_stand_for_speech_in_one_language() -> None:
    tracks = [("de", "Ein Kakadu"), ("en", "A cockatoo"), ("de", "sitzt"), ("en", "sits")]
    assert standing_for_speech(tracks, lambda t: t[0], "en") == [("en", "A cockatoo"), ("en", "sits")]
    assert standing_for_speech(tracks, lambda t: t[0], None) == [("de", "Ein Kakadu"), ("de", "sitzt")]
    assert standing_for_speech(tracks, lambda t: t[0], "fr") == [("de", "Ein Kakadu"), ("de", "sitzt")]
    assert standing_for_speech([], lambda t: t[0], "en") == []


def test_language_tags() -> None:
    assert [language_code(t) for t in ("eng", "ger", "deu", "kor", "en-US", "pt-BR", "fre")] == [
        "en", "de", "de", "ko", "en", "pt", "fr"]
    assert [language_code(t) for t in ("und", "forced", "sdh", "", None, "English", "x")] == [None] * 7


def test_a_files_own_text_streams_in_one_pass(tmp_path: Path) -> None:
    """Two SubRip streams muxed into a Matroska copy of the video: one tagged German (its words are English: the tag
    is what the file says), one untagged."""
    out = tmp_path / "muxed.mkv"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("video/manifesto.mp4")), "-i", str(media(SRT)),
                    "-i", str(media(VTT)), "-map", "0", "-map", "1", "-map", "2", "-c:v", "copy", "-c:a", "copy",
                    "-c:s", "srt", "-metadata:s:s:0", "language=ger", str(out)], check=True)
    found = read_subtitles(out, streams=2)
    assert found.notes == []
    assert [(t.origin, t.language) for t in found.tracks] == [("stream 2", "de"), ("stream 3", None)]
    expected = [text for _, text in _srt_cues(media(SRT).read_text(encoding="utf-8"))]
    assert [c.text for c in found.tracks[0].cues] == expected
    assert [c.text for c in found.tracks[1].cues] == expected  # the rolling captions, each line once
    assert read_subtitles(out, streams=0).tracks == []  # the probe found none: the file is not read again


def test_styling_is_dropped(talk: Path) -> None:
    talk.with_name("talk.srt").write_text(
        "1\n00:00:01,000 --> 00:00:03,500\n<i>Workers</i> of the <b>world</b>,\n{\\an8}unite!\n\n"
        "2\n00:00:04,000 --> 00:00:06,000\n<font color=\"#ff0000\">Marx</font> &amp; Engels\n\n", encoding="utf-8")
    (track,) = read_subtitles(talk).tracks
    assert [c.text for c in track.cues] == ["Workers of the world, unite!", "Marx & Engels"]


@pytest.mark.parametrize(("encoding", "file"), [("cp1252", "de"), ("utf-16", "de"), ("cp949", "ko"),
                                                 ("utf-8-sig", "ko")])
def test_legacy_encodings_read_as_their_text(talk: Path, encoding: str, file: str) -> None:
    """The German and Korean reference sentences of media-val as SRT cues, written in encodings that old
    subtitle files use."""
    names = {"de": "azure_customspeech_de-DE_training_trans.txt", "ko": "azure_customspeech_ko-KR_training_trans.txt"}
    root = media("MANIFEST.md").parent.parent / "media-val" / "groundtruth"
    lines = [line.split("\t", 1)[1].strip() for line in (root / names[file]).read_text(encoding="utf-8-sig").splitlines()
             if "\t" in line]
    srt = "".join(f"{i + 1}\n00:00:{2 * i:02d},000 --> 00:00:{2 * i + 1:02d},500\n{text}\n\n"
                  for i, text in enumerate(lines[:8]))
    talk.with_name(f"talk.{file}.srt").write_bytes(srt.encode(encoding))
    (track,) = read_subtitles(talk).tracks
    assert [c.text for c in track.cues] == lines[:8]
    assert track.language == file


def test_broken_subtitle_files_are_named_and_the_rest_kept(talk: Path) -> None:
    shutil.copy(media(SRT), talk.with_name("talk.en.srt"))
    talk.with_name("talk.junk.srt").write_bytes(os.urandom(4000))
    talk.with_name("talk.empty.vtt").write_bytes(b"")
    shutil.copy(media(SRT), talk.with_name("talk.ass"))  # SubRip under an ASS name
    with open(talk.with_name("talk.huge.srt"), "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    found = read_subtitles(talk)
    assert [t.origin for t in found.tracks] == ["talk.en.srt"]
    notes = "\n".join(found.notes)
    assert "subtitle file talk.junk.srt not read" in notes
    assert "subtitle file talk.empty.vtt not read: empty" in notes
    assert "subtitle file talk.ass holds no cues" in notes
    assert "subtitle file talk.huge.srt not read: larger than 20 MB" in notes


def _wrapped(text: str, width: int = 32) -> list[str]:
    """A caption's words in lines of at most `width` characters, as closed captions are written."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def _other_formats(talk: Path, cues: list[tuple[float, str]]) -> dict[str, tuple[int, float]]:
    """manifesto.srt's first cues written beside the talk in the other formats subtitle files come in: by FFmpeg
    (TTML, LRC), by ttconv (SCC, from lines a caption fits) and here (SAMI in EUC-KR as Korean files are, with the
    empty cue that clears the screen; MicroDVD counting the video's 25 frames a second, and with a first cue that
    names its rate; SubViewer; YouTube's SBV). Each name → (how many cues it holds, how near its times are kept)."""
    srt = media(SRT)
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(srt), str(talk.with_name("talk.en.ttml"))], check=True)
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(srt), str(talk.with_name("talk.lrc"))], check=True)
    shutil.copy(talk.with_name("talk.en.ttml"), talk.with_name("talk.dfxp"))
    from ttconv.scc import writer as scc_writer
    from ttconv.srt import reader as srt_reader

    ends = [start for start, _ in cues[1:]] + [cues[-1][0] + 2]
    wrapped = "".join(f"{i + 1}\n{_stamp(start, ',')} --> {_stamp(end, ',')}\n" + "\n".join(_wrapped(text)) + "\n\n"
                      for i, ((start, text), end) in enumerate(zip(cues, ends, strict=True)))
    talk.with_name("talk.scc").write_text(scc_writer.from_model(srt_reader.to_model(io.StringIO(wrapped))))
    sync = "".join(f"<SYNC Start={round(start * 1000)}><P Class=KRCC>{text}\n" for start, text in cues)
    talk.with_name("talk.ko.smi").write_bytes(
        ("<SAMI>\n<HEAD>\n<STYLE TYPE=\"text/css\">\n<!--\nP { font-family: Gulim; }\n"
         ".KRCC { Name: Korean; lang: ko-KR; }\n-->\n</STYLE>\n</HEAD>\n<BODY>\n" + sync
         + f"<SYNC Start={round(ends[-1] * 1000)}><P Class=KRCC>&nbsp;\n</BODY>\n</SAMI>\n").encode("cp949"))
    frames = "".join(f"{{{round(start * 25)}}}{{{round(end * 25)}}}{'|'.join(_wrapped(text))}\n"
                     for (start, text), end in zip(cues, ends, strict=True))
    talk.with_name("talk.sub").write_text(frames)
    (talk.parent / "named").mkdir()
    shutil.copy(talk, talk.parent / "named" / "talk.mp4")
    (talk.parent / "named" / "talk.sub").write_text("{1}{1}50.000\n" + frames)  # at 50 frames a second
    times = "".join(f"{_stamp(start, '.')},{_stamp(end, '.')}\n{text}\n\n" for (start, text), end in zip(cues, ends, strict=True))
    (talk.parent / "viewer").mkdir()
    shutil.copy(talk, talk.parent / "viewer" / "talk.mp4")
    (talk.parent / "viewer" / "talk.sub").write_text("[INFORMATION]\n[TITLE]talk\n[END INFORMATION]\n[SUBTITLE]\n"
                                                      + times)
    talk.with_name("talk.sbv").write_text("".join(f"{_stamp(start, ':')},{_stamp(end, ':')}\n{text}\n\n"
                                                  for (start, text), end in zip(cues, ends, strict=True)))
    return {"talk.en.ttml": (37, 0.002), "talk.dfxp": (37, 0.002), "talk.lrc": (37, 0.011),
            "talk.scc": (len(cues), 0.1), "talk.ko.smi": (len(cues), 0.001), "talk.sub": (len(cues), 0.021),
            "talk.sbv": (len(cues), 0.001)}


def _stamp(seconds: float, mark: str) -> str:
    """SubRip's 01:02:03,456 (mark ","), SubViewer's 01:02:03.46 (mark ".") or SBV's 1:02:03.456 (mark ":")."""
    whole, millis = divmod(round(seconds * 1000), 1000)
    hours, minutes, secs = whole // 3600, whole // 60 % 60, whole % 60
    if mark == ":":
        return f"{hours}:{minutes:02d}:{secs:02d}.{millis:03d}"
    fraction = f"{millis:03d}" if mark == "," else f"{millis // 10:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{mark}{fraction}"


def test_other_subtitle_formats_read_as_their_cues(talk: Path) -> None:
    """TTML, DFXP, SCC, SAMI, LRC, MicroDVD, SubViewer and SBV files of the same captions give the same cues, at
    their times, with the language their names give."""
    expected = _srt_cues(media(SRT).read_text(encoding="utf-8"))
    made = _other_formats(talk, expected[:12])
    found = read_subtitles(talk)
    assert found.notes == []
    assert sorted((t.origin, t.language) for t in found.tracks) == sorted(
        (name, "en" if ".en." in name else "ko" if ".ko." in name else None) for name in made)
    for track in found.tracks:
        count, near = made[track.origin]
        assert [c.text for c in track.cues] == [text for _, text in expected[:count]], track.origin
        assert all(abs(c.start - start) <= near for c, (start, _) in zip(track.cues, expected, strict=False)), track.origin
        assert all(c.end > c.start for c in track.cues[:-1]), track.origin
    # A MicroDVD file that names its frame rate is read at that rate; a SubViewer file under the same suffix as
    # MicroDVD is read as what it is.
    for folder, scale in (("named", 0.5), ("viewer", 1.0)):
        (track,) = read_subtitles(talk.parent / folder / "talk.mp4").tracks
        assert [c.text for c in track.cues] == [text for _, text in expected[:12]]
        assert all(abs(c.start - start * scale) <= 0.021 for c, (start, _) in zip(track.cues, expected, strict=False))
    assert [p.name for p in discover([talk.parent]).files] == ["talk.mp4", "talk.mp4", "talk.mp4"]
    assert discover([talk.parent]).skipped == []


def test_timed_text_as_players_and_broadcasters_write_it(talk: Path) -> None:
    """TTML timed in ticks with styled spans and line breaks (as streaming services deliver it), TTML whose times
    count from a division's begin, and DFXP under the draft namespace of Flash-era players: the same cues."""
    cues = _srt_cues(media(SRT).read_text(encoding="utf-8"))[:6]
    ends = [start for start, _ in cues[1:]] + [cues[-1][0] + 2]

    def lines(text: str) -> str:
        first, *rest = _wrapped(text, 20)
        return f'<span tts:fontStyle="italic">{first}</span>' + "".join(f"<br/>{line}" for line in rest)

    ticks = "".join(f'<p begin="{round(a * 10_000_000)}t" end="{round(b * 10_000_000)}t">{lines(text)}</p>\n'
                    for (a, text), b in zip(cues, ends, strict=True))
    talk.with_name("talk.en.ttml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<tt xmlns="http://www.w3.org/ns/ttml" '
        'xmlns:ttp="http://www.w3.org/ns/ttml#parameter" xmlns:tts="http://www.w3.org/ns/ttml#styling" '
        f'ttp:tickRate="10000000" xml:lang="en"><body><div>\n{ticks}</div></body></tt>\n', encoding="utf-8")
    clock = "".join(f'<p begin="{_stamp(a, ".")}" end="{b:.3f}s">{lines(text)}</p>\n'
                    for (a, text), b in zip(cues, ends, strict=True))
    talk.with_name("talk.dfxp").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<tt xml:lang="en" xmlns="http://www.w3.org/2006/10/ttaf1" '
        'xmlns:tts="http://www.w3.org/2006/10/ttaf1#styling"><head><styling><style xml:id="s1" tts:color="white"/>'
        f'</styling></head><body><div>\n{clock}</div></body></tt>\n', encoding="utf-8")
    # Times nested in a division that begins a second in, the text laid out over indented lines.
    nested = "".join(f'    <p begin="{a - 1:.3f}s" end="{b - 1:.3f}s">\n      ' + "\n      ".join(_wrapped(text, 20))
                     + "\n    </p>\n" for (a, text), b in zip(cues, ends, strict=True))
    talk.with_name("talk.nested.ttml").write_text(
        f'<tt xmlns="http://www.w3.org/ns/ttml">\n <body>\n  <div begin="1s">\n{nested}  </div>\n </body>\n</tt>\n')
    found = read_subtitles(talk)
    assert found.notes == [] and len(found.tracks) == 3
    for track in found.tracks:
        assert [c.text for c in track.cues] == [text for _, text in cues], track.origin
        assert all(abs(c.start - a) <= 0.011 for c, (a, _) in zip(track.cues, cues, strict=True)), track.origin


def test_broken_files_of_the_other_formats_are_named(talk: Path) -> None:
    talk.with_name("talk.ttml").write_text("<tt xmlns='http://www.w3.org/ns/ttml'><body><div><p begin='1s'>cut off")
    talk.with_name("talk.dfxp").write_text("<html><body>not timed text</body></html>")
    talk.with_name("talk.scc").write_bytes(os.urandom(3000))
    talk.with_name("talk.sub").write_bytes(b"\x00\x00\x01\xba" + os.urandom(4000))  # VobSub: MPEG-PS pictures
    talk.with_name("talk.en.smi").write_text("<SAMI><BODY><P>no sync at all</BODY></SAMI>")
    talk.with_name("talk.lrc").write_text("[ar:nobody]\n[ti:no lines]\n")
    found = read_subtitles(talk)
    assert found.tracks == []
    notes = "\n".join(found.notes)
    assert "subtitle file talk.ttml not read: not a TTML file (" in notes
    assert "subtitle file talk.dfxp not read: not a TTML file" in notes
    assert "subtitle file talk.scc not read: " in notes
    assert "subtitle file talk.sub not read: VobSub pictures, not text" in notes
    assert "subtitle file talk.en.smi holds no cues" in notes or "subtitle file talk.en.smi not read" in notes
    assert "subtitle file talk.lrc holds no cues" in notes or "subtitle file talk.lrc not read" in notes
    assert len(found.notes) == 6


def test_passages_join_cues_into_spoken_lengths(talk: Path) -> None:
    shutil.copy(media(SRT), talk.with_name("talk.srt"))
    (track,) = read_subtitles(talk).tracks
    cues = list(track.cues)
    joined = passages(cues)
    assert " ".join(p.text for p in joined) == " ".join(c.text for c in cues)  # every word, in order
    assert len(joined) < len(cues)
    alone = {c.text for c in cues}  # a single cue may be longer itself
    assert all(p.text in alone or (len(p.text) <= MAX_PASSAGE_CHARS and p.end - p.start <= MAX_PASSAGE_SECONDS)
               for p in joined)
    assert joined[0].text == ("this audiobook is in the public domain you can find the text version of this audio "
                              "book at www.marxists.org")
    # A sentence's end ends a passage; so does a pause.
    first = cues[0]
    ended = passages([first, replace(first, start=first.end, end=first.end + 1, text="Yes."),
                      replace(first, start=first.end + 1, end=first.end + 2, text="No."),
                      replace(first, start=first.end + 5, end=first.end + 6, text="then")])
    assert [p.text for p in ended] == [f"{first.text} Yes.", "No.", "then"]


def test_discovery_reads_subtitles_with_their_file(talk: Path) -> None:
    shutil.copy(media(SRT), talk.with_name("talk.en.srt"))
    shutil.copy(media(SRT), talk.with_name("lost.srt"))
    found = discover([talk.parent])
    assert [p.name for p in found.files] == ["talk.mp4"]
    assert found.skipped == [(str(talk.with_name("lost.srt")),
                              "unsupported type (.srt: subtitles of no media file found here)")]
    # Subtitles beside a link to the file, in another folder: not read, and the reason says where they would be.
    shelf = talk.parent / "shelf"
    shelf.mkdir()
    (shelf / "Talk.mp4").symlink_to(talk)
    shutil.copy(media(SRT), shelf / "Talk.de.srt")
    found = discover([shelf])
    assert [p.name for p in found.files] == ["talk.mp4"]
    assert found.skipped == [(str(shelf / "Talk.de.srt"), f"unsupported type (.srt: subtitles of Talk.mp4, a link to "
                                                          f"{talk}: subtitles are read beside the file itself)")]


@pytest.mark.slow
def test_ingest_indexes_subtitles_and_reads_them_again_when_they_change(tmp_path: Path, cache_dir: Path,
                                                                        embedder) -> None:
    """The first 40 s of manifesto.mp4 with its captions beside it: the captions are searchable moments (where
    Whisper hears "Guizhou", they say "guizot"), cues past the cut's end are dropped, an unchanged file is not read
    again, and a subtitle file added later is. A video in which nothing is said has its subtitles for a transcript."""
    folder = tmp_path / "talks"
    folder.mkdir()
    video = folder / "talk.mp4"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("video/manifesto.mp4")), "-t", "40", "-c", "copy",
                    str(video)], check=True)
    shutil.copy(media(VTT), folder / "talk.en.vtt")
    shutil.copy(media("video/cockatoo.mp4"), folder / "bird.mp4")
    (folder / "bird.de.srt").write_text("1\n00:00:01,000 --> 00:00:04,000\nEin Kakadu sitzt auf der Stange.\n\n",
                                        encoding="utf-8")
    (folder / "bird.en.srt").write_text("1\n00:00:01,000 --> 00:00:04,000\nA cockatoo sits on its perch.\n\n",
                                        encoding="utf-8")
    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False})
    settings.index_dir.mkdir(parents=True)
    pipeline = InProcessPipeline(settings)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [folder]), index, pipeline)
        ids = {Path(o.path).name: o.video_id for o in report.indexed}
        assert sorted(ids) == ["bird.mp4", "talk.mp4"]
        stored = index.store.segments_of(ids["talk.mp4"], modality=SUBTITLE)
        record = index.catalog.get(ids["talk.mp4"])
        assert record is not None and record.duration is not None
        assert stored and all(s["end"] <= record.duration + 1e-6 for s in stored)
        assert {(s["language"], s["extra"][TRACK_FIELD]) for s in stored} == {("en", "talk.en.vtt")}
        assert "guizot french radicals" in " ".join(s["text"] for s in stored)

        hits = search(index, embedder, "Guizot and the French radicals", limit=3)
        assert hits[0].modality == SUBTITLE and "guizot" in hits[0].text
        assert hits[0].start < 37.3 and hits[0].end > 29.6

        archive = Archive(settings, index, embedder)
        assert all(s["modality"] == "speech" for s in archive.speech(ids["talk.mp4"]))
        bird = index.catalog.get(ids["bird.mp4"])
        assert bird is not None and bird.language == "de"  # nothing heard: the first track's language
        assert [s["text"] for s in archive.speech(ids["bird.mp4"])] == ["Ein Kakadu sitzt auf der Stange."]

        again = ingest(IngestRequest(settings, [folder]), index, pipeline)
        assert [o.status for o in again.outcomes] == ["unchanged", "unchanged"]
        (folder / "talk.de.srt").write_text("1\n00:00:01,000 --> 00:00:04,000\nEin Gespenst geht um in Europa\n\n",
                                            encoding="utf-8")
        changed = ingest(IngestRequest(settings, [folder]), index, pipeline)
        assert {Path(o.path).name: o.status for o in changed.outcomes} == {"bird.mp4": "unchanged",
                                                                           "talk.mp4": "indexed"}
        stored = index.store.segments_of(ids["talk.mp4"], modality=SUBTITLE)
        assert ("de", "Ein Gespenst geht um in Europa") in {(s["language"], s["text"]) for s in stored}
