"""Moments cut out of real media files: exact spans, clean first pictures, clear refusals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mediaindex.cli.app import parse_time
from mediaindex.errors import MediaError
from mediaindex.media.clip import MAX_CLIP_S, check_span, clip_name, cut
from mediaindex.media.probe import probe
from tests.conftest import REPO, cli_environment, frame_at, media
from tests.test_cli import run


def _picture_at(path: Path, t: float) -> np.ndarray:
    """The clip's frame at t seconds, decoded from its start, at the size `frame_at` gives."""
    import av
    import cv2

    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            if frame.pts is not None and float(frame.pts * frame.time_base) >= t:
                rgb = frame.to_ndarray(format="rgb24")
                scale = 512 / max(rgb.shape[:2])
                return cv2.resize(rgb, (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale)),
                                  interpolation=cv2.INTER_AREA)
    raise AssertionError(f"no frame at {t} s in {path}")


def _differs(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two pictures, 0..255."""
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_sound_alone_becomes_an_m4a_of_the_span(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative name that looks like an option to ffmpeg is still a file name
    out = cut(media("audio/jfk.flac"), 2.0, 5.5, Path("-jfk.m4a"), has_video=False)
    assert (tmp_path / "-jfk.m4a").is_file()
    info = probe(out)
    assert not info.has_video and info.has_audio and info.duration == pytest.approx(3.5, abs=0.06)


@pytest.mark.parametrize(("rel", "start", "end"), [
    # A 4:4:4 H.264 file whose index names frames that decode to garbage when jumped to: decoded from its start.
    ("video/cockatoo.mp4", 10.0, 14.0),
    # A start past the first minute: a jump 10 s before it, then decoded to it.
    ("video/manifesto.mp4", 70.0, 75.0),
])
def test_a_video_clip_is_the_span_and_its_pictures_are_the_files_own(tmp_path: Path, rel: str, start: float,
                                                                     end: float) -> None:
    out = cut(media(rel), start, end, tmp_path / "clip.mp4", has_video=True)
    info = probe(out)
    assert info.has_video and info.duration == pytest.approx(end - start, abs=0.1)
    for offset in (0.0, 1.0, end - start - 1.0):
        own, clipped = frame_at(rel, start + offset), _picture_at(out, offset)
        assert own.shape == clipped.shape and _differs(own, clipped) < 12, offset  # H.264 at crf 23, not garbage


def test_spans_that_cannot_be_cut_are_refused_clearly() -> None:
    assert check_span(3, 999, duration=14.0) == (3.0, 14.0)  # held to the file's end
    for start, end, duration, message in [
        (-1, 2, None, "start must be a time"), (math.nan, 2, None, "start must be a time"),
        (0, math.inf, None, "end must be a time"), (True, 2, None, "start must be a time"),
        (5, 3, None, "ends (3 s) before it starts (5 s)"), (20, 30, 14.0, "after the file ends (14 s)"),
        (0, MAX_CLIP_S + 1, None, f"at most {MAX_CLIP_S:g} s"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check_span(start, end, duration)


def test_a_damaged_file_fails_with_ffmpegs_reason_and_leaves_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(media("video/manifesto.mp4").read_bytes()[:4096])  # the header, none of the pictures
    with pytest.raises(MediaError, match="ffmpeg could not cut the clip"):
        cut(broken, 1.0, 2.0, tmp_path / "out.mp4", has_video=True)
    assert not (tmp_path / "out.mp4").exists()


def test_names_and_times() -> None:
    assert clip_name("/x/My talk: part 1?.mov", 62.5, 70, True) == "My_talk__part_1__1m02.5s-1m10.0s.mp4"
    assert clip_name("/x/jfk.flac", 0, 5.5, False) == "jfk_0m00.0s-0m05.5s.m4a"
    assert [parse_time(t, "start") for t in ("83.5", "1:23.5", "1:01:23.5", " 7 ")] == [83.5, 83.5, 3683.5, 7.0]
    for bad in ("", "abc", "-3", "1:75", "1:2:3:4", "nan", "1::2"):
        with pytest.raises(ValueError, match="is not a time"):
            parse_time(bad, "start")


@pytest.mark.slow
@pytest.mark.beside  # waits on the CLI it runs
def test_the_clip_command_writes_the_moment_and_never_overwrites(tmp_path: Path, cache_dir: Path) -> None:
    env = cli_environment(tmp_path / "no-index", cache_dir, tmp_path / "t")
    wrote = run("clip", str(media("audio/jfk.flac")), "0:02", "5.5", "-o", str(tmp_path / "ask.m4a"), env=env)
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.strip() == f"wrote {tmp_path / 'ask.m4a'} (0:02.0–0:05.5 of jfk.flac, 3.5 s)"
    assert probe(tmp_path / "ask.m4a").duration == pytest.approx(3.5, abs=0.06)
    for args, message in [
        ([str(media("audio/jfk.flac")), "1", "2", "-o", str(tmp_path / "ask.m4a")], "exists: choose another --output"),
        ([str(media("audio/jfk.flac")), "soon", "2"], "'soon' is not a time"),
        ([str(media("audio/jfk.flac")), "30", "40"], "after the file ends"),
        (["talk.mp4", "1", "2"], "no index"),
        ([str(media("audio/jfk.flac")), "1", "2", "-o", str(tmp_path / "none" / "x.m4a")], "is not a folder"),
        # The data is M4A (MP4 with video) whatever the name: another suffix would name a format it is not.
        ([str(media("audio/jfk.flac")), "1", "2", "-o", str(tmp_path / "ask.mp3")],
         "a clip is written as M4A (AAC): name it .m4a or .mp4 or .m4b, not ask.mp3"),
        ([str(media("video/cockatoo.mp4")), "1", "2", "-o", str(tmp_path / "bird.mkv")],
         "a clip is written as MP4 (H.264 + AAC): name it .mp4 or .m4v or .mov, not bird.mkv"),
    ]:
        refused = run("clip", *args, env=env)
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr, args
    assert not (tmp_path / "no-index").exists() and REPO.is_dir()
