"""Transcript export: subtitles, JSON, text and TSV from speech segments, and the `transcript` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from mediaindex.errors import TranscriptFormatError
from mediaindex.index.transcript import CueLimits, cues, export, to_srt, to_tsv, to_txt, to_vtt
from tests.conftest import REPO, make_settings, media

SEGMENTS = [
    {"start": 3725.5, "end": 3727.25, "text": "  second -->  line ", "language": "en", "confidence": -0.3,
     "speaker": "S2", "extra": {"words": [[3725.5, 3726.0, "second"], [3726.1, 3727.25, "--> <line>"]]}},
    {"start": 0.0, "end": 1.0049, "text": "First.", "language": "en", "confidence": -0.1, "speaker": "S1",
     "extra": {}},
    {"start": 5.0, "end": 6.0, "text": "   ", "language": "en", "confidence": -0.2, "extra": {}},
]


def _cue_text(srt: str) -> str:
    """The words of an SRT file's cues, one line (numbers and times left out)."""
    lines = [b.splitlines()[2:] for b in srt.strip().split("\n\n")]
    return " ".join(" ".join(part.removeprefix("S1: ") for part in cue) for cue in lines)


def _seconds(stamp: str) -> float:
    hours, minutes, rest = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest.replace(",", "."))


def test_srt_and_vtt_are_well_formed_with_speakers() -> None:
    srt = to_srt(SEGMENTS)
    assert srt == ("1\n00:00:00,000 --> 00:00:01,005\nS1: First.\n\n"
                   "2\n01:02:05,500 --> 01:02:07,250\nS2: second -> <line>\n")
    vtt = to_vtt(SEGMENTS)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.005\n<v S1>First.</v>\n")
    assert "01:02:05.500 --> 01:02:07.250\n<v S2>second --&gt; &lt;line&gt;</v>\n" in vtt  # escaped cue text


def test_json_txt_and_tsv_carry_words_language_and_speaker() -> None:
    data = json.loads(export(SEGMENTS, "json", {"video_id": "v1", "language": "en"}))
    assert data["video_id"] == "v1" and [s["start"] for s in data["segments"]] == [0.0, 5.0, 3725.5]
    assert data["segments"][2]["words"][0] == {"start": 3725.5, "end": 3726.0, "word": "second"}
    assert data["segments"][2]["avg_logprob"] == -0.3 and data["segments"][2]["speaker"] == "S2"
    assert to_txt(SEGMENTS) == "S1: First.\nS2: second --> line\n"
    assert to_tsv(SEGMENTS).splitlines() == ["start\tend\tspeaker\tlanguage\ttext", "0\t1005\tS1\ten\tFirst.",
                                             "3725500\t3727250\tS2\ten\tsecond --> line"]


def test_a_text_transcript_heads_each_marked_chapter_with_its_title() -> None:
    """Lines under their chapter's title, the speaker named again under each; JSON says each segment's chapter."""
    said = [(0.0, "S1", "Good evening.", "Opening"), (2.0, "S1", "Tonight, the budget.", "Opening"),
            (5.0, "S1", "First, taxes.", "Taxes"), (7.0, "S2", "And spending?", "Taxes"), (9.0, "S2", "Thanks.", None)]
    segments = [{"start": t, "end": t + 1.5, "text": text, "speaker": who, "extra": {"in_chapter": chapter} if chapter
                 else {}} for t, who, text, chapter in said]
    assert to_txt(segments) == ("# Opening\nS1: Good evening.\nTonight, the budget.\n\n"
                                "# Taxes\nS1: First, taxes.\nS2: And spending?\nThanks.\n")
    assert [s["chapter"] for s in json.loads(export(segments, "json", {}))["segments"]] == [
        "Opening", "Opening", "Taxes", "Taxes", None]
    assert "#" not in to_txt(SEGMENTS)  # a file that marks none


def test_unknown_formats_and_limits_are_refused_clearly() -> None:
    with pytest.raises(TranscriptFormatError, match="unknown transcript format 'doc'"):
        export(SEGMENTS, "doc", {})
    for bad in ({"max_line_width": 0}, {"max_line_width": 5}, {"max_line_count": -1}, {"max_line_count": 1.5},
                {"max_duration": 0}):
        with pytest.raises(TranscriptFormatError, match="must be"):
            CueLimits(**bad)


def _vosk_segments() -> list[dict]:
    """manifesto.mp4's reference word timings (vosk), as stored segments (one per caption line)."""
    data = json.loads(media("groundtruth/manifesto.vosk.json").read_text(encoding="utf-8"))
    return [{"start": s["start"], "end": s["end"], "text": s["content"], "language": "en",
             "extra": {"words": [[w["start"], w["end"], w["word"]] for w in s["words"]]}} for s in data]


def check_cues(segments: list[dict], limits: CueLimits) -> None:
    """Every cue within the limits, and the cues' words and times exactly the transcript's."""
    made = cues(segments, limits)
    single = {w[2].strip() for s in segments for w in s["extra"]["words"]}
    for cue in made:
        assert len(cue.lines) <= limits.max_line_count, cue
        # Columns, as on screen (two for a Chinese, Japanese or Korean character); a lone word is never cut.
        assert all(cell_len(line) <= limits.max_line_width or line in single for line in cue.lines), cue
        assert cue.end - cue.start <= limits.max_duration or len(cue.text.split()) == 1, cue
    words = [w for s in sorted(segments, key=lambda s: s["start"]) for w in s["extra"]["words"]]
    # The same characters in the same order (spaces aside: Chinese and Japanese are written without them).
    assert "".join("".join(c.text.split()) for c in made) == "".join("".join(w[2].split()) for w in words)
    starts = {round(w[0], 3) for w in words}
    ends = {round(w[1], 3) for w in words}
    assert all(c.start in starts and c.end in ends for c in made)
    assert all(a.end <= b.start for a, b in zip(made, made[1:], strict=False))  # no overlaps


@pytest.mark.parametrize("limits", [CueLimits(), CueLimits(max_line_width=20, max_line_count=1),
                                    CueLimits(max_line_width=60, max_line_count=3, max_duration=10.0)])
def test_cues_fit_the_limits_over_reference_word_timings(limits: CueLimits) -> None:
    check_cues(_vosk_segments(), limits)
    long = [{"start": 0.0, "end": 40.0, "text": "", "language": "en",  # one 40-second run-on "sentence"
             "extra": {"words": [[i * 0.5, i * 0.5 + 0.4, f"word{i}"] for i in range(80)]}}]
    check_cues(long, limits)


def test_unspaced_languages_are_laid_out_without_spaces() -> None:
    zh = [{"start": 0.0, "end": 1.0, "text": "砸自己的脚", "language": "zh",
           "extra": {"words": [[0.0, 0.3, "砸"], [0.3, 0.6, "自己"], [0.6, 0.8, "的"], [0.8, 1.0, "脚"]]}}]
    assert [c.lines for c in cues(zh)] == [("砸自己的脚",)]


def test_wide_characters_take_two_columns_of_a_line() -> None:
    """A Korean, Chinese or Japanese character takes two columns on screen: 42 columns hold 21 of them (counted
    as characters, a 35-character Korean subtitle line took 58 columns)."""
    ko_words = ["각", "프로젝트는", "도메인", "및", "국가", "언어에만", "적용되며", "포털에서", "만들", "수", "있습니다."]
    ko = [{"start": 0.0, "end": 6.0, "text": " ".join(ko_words), "language": "ko",
           "extra": {"words": [[i * 0.5, i * 0.5 + 0.4, w] for i, w in enumerate(ko_words)]}}]
    zh_words = ["搬起", "石头", "砸", "自己", "的", "脚", "是", "一句", "很", "有名", "的", "中国", "俗语", "意思", "是",
                "害人", "反而", "害了", "自己"]
    zh = [{"start": 0.0, "end": 6.0, "text": "".join(zh_words), "language": "zh",
           "extra": {"words": [[i * 0.3, i * 0.3 + 0.25, w] for i, w in enumerate(zh_words)]}}]
    for segments in (ko, zh):
        made = cues(segments)
        assert [len(c.lines) for c in made] == [2], made  # one cue of two lines, neither wider than 42 columns
        assert all(cell_len(line) <= 42 for c in made for line in c.lines), made
        check_cues(segments, CueLimits())
    assert cell_len(cues(ko)[0].lines[0]) > 30  # the lines are filled, not cut at half the width


def test_a_sentence_is_not_cut_to_leave_a_cue_too_short_to_read() -> None:
    """Among cuts alike (inside a phrase), not the one that leaves the last two words on screen for 0.58 s."""
    from mediaindex.index.transcript import MIN_CUE_S

    words = ["the", "spectre", "of", "communism", "haunts", "old", "Europe", "and", "all", "the", "powers", "of",
             "Europe", "have", "joined", "it"]
    seg = [{"start": 0.0, "end": 4.8, "text": " ".join(words), "language": "en",
            "extra": {"words": [[i * 0.3, i * 0.3 + 0.28, w] for i, w in enumerate(words)]}}]
    made = cues(seg)
    assert len(made) == 2 and all(c.end - c.start >= MIN_CUE_S for c in made), made
    check_cues(seg, CueLimits())


slow = pytest.mark.slow


@pytest.fixture(scope="module")
def transcript_index(tmp_path_factory: pytest.TempPathFactory, pipeline, embedder, cache_dir: Path):
    from mediaindex.index.index import MediaIndex
    from mediaindex.service import IngestRequest, ingest

    settings = make_settings(tmp_path_factory.mktemp("transcript-index"), cache_dir)
    clip = media("audio/jfk.flac")
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [clip, media("video/cockatoo.mp4")]), index, pipeline)
        assert len(report.indexed) == 2
        ids = {Path(o.path).name: o.video_id for o in report.indexed}
    return settings.index_dir, ids


def _cli(*args: str, index: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run([sys.executable, "-m", "mediaindex", "transcript", *args, "--index", str(index)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


@slow
def test_transcript_command_prints_each_format(transcript_index) -> None:
    index, ids = transcript_index
    srt = _cli(str(media("audio/jfk.flac")), index=index)
    assert srt.returncode == 0, srt.stderr
    assert srt.stdout.startswith("1\n00:00:0") and "ask not what your country can do for you," in _cue_text(srt.stdout)
    vtt = _cli(ids["jfk.flac"], "--format", "vtt", index=index)  # by video id
    assert vtt.returncode == 0 and vtt.stdout.startswith("WEBVTT\n\n")
    # By the name search shows (no file of that name where the command runs) and by the start of its id.
    assert _cli("jfk.flac", "--format", "vtt", index=index).stdout == vtt.stdout
    assert _cli(ids["jfk.flac"][:6], "--format", "vtt", index=index).stdout == vtt.stdout
    data = json.loads(_cli(ids["jfk.flac"], "-f", "json", index=index).stdout)
    assert data["language"] == "en" and data["source"] == str(media("audio/jfk.flac"))
    americans = next(w for s in data["segments"] for w in s["words"] if w["word"].startswith("Americans"))
    assert abs(americans["start"] - 1.8) < 0.3
    assert all(s["avg_logprob"] < 0 for s in data["segments"])
    silent = _cli(ids["cockatoo.mp4"], "--format", "srt", index=index)
    assert silent.returncode == 0 and silent.stdout == "" and "no speech" in silent.stderr


@slow
def test_transcript_command_refuses_bad_input(transcript_index, tmp_path: Path) -> None:
    index, _ = transcript_index
    bad_format = _cli(str(media("audio/jfk.flac")), "--format", "docx", index=index)
    assert bad_format.returncode == 2 and "unknown transcript format 'docx'" in bad_format.stderr
    unknown = _cli(str(tmp_path / "never-ingested.mp4"), index=index)
    assert unknown.returncode == 2 and "no such file, and not an indexed file's id, path or name" in unknown.stderr
    no_index = _cli("abc", index=tmp_path / "nothing-here")
    assert no_index.returncode == 2 and "no index yet" in no_index.stderr
    zero = _cli(str(media("audio/jfk.flac")), "--max-line-count", "0", index=index)
    assert zero.returncode == 2 and "max-line-count must be a whole number" in zero.stderr
    for result in (bad_format, unknown, no_index):
        assert "Traceback" not in result.stderr


@slow
@pytest.mark.beside  # waits on the CLI it runs
def test_transcript_of_a_file_never_ingested(tmp_path: Path) -> None:
    """Transcribed on the spot and printed; the index is not touched."""
    index = tmp_path / "no-index"
    srt = _cli(str(media("audio/jfk.flac")), index=index)
    assert srt.returncode == 0, srt.stderr
    assert srt.stdout.startswith("1\n00:00:0") and "ask not what your country" in _cue_text(srt.stdout)
    # 108 characters in 10 s: at least two cues of at most 7 s and two lines of 42 characters each.
    blocks = [b.splitlines() for b in srt.stdout.strip().split("\n\n")]
    assert len(blocks) >= 2 and all(len(b) <= 4 and all(len(line) <= 42 for line in b[2:]) for b in blocks)
    assert all(_seconds(b[1].split(" --> ")[1]) - _seconds(b[1].split(" --> ")[0]) <= 7.0 for b in blocks)
    data = json.loads(_cli(str(media("audio/jfk.flac")), "-f", "json", index=index).stdout)
    assert data["video_id"] is None and data["language"] == "en" and data["segments"][0]["words"]
    assert not index.exists()
    silent = _cli(str(media("video/cockatoo.mp4")), "-f", "txt", index=index)
    assert silent.returncode == 0 and silent.stdout == "" and "no speech" in silent.stderr
    none = _cli(str(media("video/testvideo.mp4")), index=index)
    assert none.returncode == 2 and "has no audio track" in none.stderr and "Traceback" not in none.stderr
    for bad in ("0", "-1"):
        refused = _cli(str(media("audio/jfk.flac")), "--speakers", bad, index=index)
        assert refused.returncode == 2 and "number of speakers must be a whole number from 1 to 20" in refused.stderr
    two = _cli(str(media("audio/jfk.flac")), "-f", "tsv", "--speakers", "1", index=index)
    assert two.returncode == 0 and {row.split("\t")[2] for row in two.stdout.splitlines()[1:]} == {"S1"}
