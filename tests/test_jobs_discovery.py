"""Every entry of a folder given to ingest gets exactly one line with a specific reason; names are escaped.

The broken entries are made at test time beside links to real media; the CLI runs as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediaindex.media.probe import NOT_UTF8_NAME
from mediaindex.pipeline.discover import discover, shown
from mediaindex.pipeline.inputs import plan_inputs
from tests.conftest import REPO, media


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    """A folder with two good media links and one of every kind of entry that cannot be ingested."""
    root = tmp_path / "messy"
    (root / "sub").mkdir(parents=True)
    (root / "jfk.flac").symlink_to(media("audio/jfk.flac"))
    (root / "sub" / "english.wav").symlink_to(media("audio/english.wav"))
    (root / "gone.mp4").symlink_to(tmp_path / "deleted.mp4")           # dangling
    (root / "self.mp4").symlink_to(root / "self.mp4")                   # a link to itself
    (root / "sub" / "up").symlink_to(root)                              # a folder link back up: a loop
    os.mkfifo(root / "pipe.wav")                                        # not a regular file
    (root / "notes.txt").write_text("not media")                        # unsupported type
    (root / ".env").write_text("SECRET=1")                              # hidden
    (root / "again.flac").symlink_to(media("audio/jfk.flac"))           # the same file as jfk.flac
    (root / "bad\nname.mp4").symlink_to(tmp_path / "nowhere.mp4")       # a newline in a name
    (root / "esc\x1b[31m.txt").write_text("x")                          # a terminal escape in a name
    (root / os.fsdecode(b"caf\xe9.flac")).write_bytes(media("audio/jfk.flac").read_bytes())  # a Latin-1 name
    (root / os.fsdecode(b"m\xfcnchen")).mkdir()                          # a folder so named
    (root / os.fsdecode(b"m\xfcnchen") / "talk.wav").symlink_to(media("audio/english.wav"))
    return root


def _written(name: str) -> str:
    """A name as the skipped lines write it: bytes that are not UTF-8 written out ("caf\\xe9")."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def test_every_entry_gets_exactly_one_specific_reason(messy: Path) -> None:
    found = discover([messy])
    assert sorted(p.name for p in found.files) == ["english.wav", "jfk.flac"]
    reasons = {Path(p).relative_to(messy).as_posix(): r for p, r in found.skipped}
    assert len(found.skipped) == len(reasons)  # one line per entry, never two
    assert reasons["gone.mp4"].startswith("dangling symlink")
    assert reasons["self.mp4"] == "symlink loop"
    assert reasons["sub/up"].startswith("symlink loop")
    assert reasons["pipe.wav"] == "not a regular file (a named pipe)"
    assert reasons["notes.txt"] == "unsupported type (.txt)"
    assert reasons[".env"].startswith("hidden")
    assert reasons["jfk.flac"] == f"the same file as {messy / 'again.flac'}"  # walked in name order
    assert reasons["bad\nname.mp4"].startswith("dangling symlink")
    assert reasons["esc\x1b[31m.txt"].startswith("unsupported type")
    assert reasons["caf\\xe9.flac"] == reasons["m\\xfcnchen"] == NOT_UTF8_NAME  # the folder once, not its files
    every = {_written(e.name) for e in os.scandir(messy)} | {f"sub/{e.name}" for e in os.scandir(messy / "sub")}
    accounted = set(reasons) | {"again.flac", "sub/english.wav"}
    assert accounted == every - {"sub"}  # nothing passed over silently (the folder itself is walked)


def test_arguments_say_what_is_wrong(tmp_path: Path) -> None:
    loop = tmp_path / "loop.mp4"
    loop.symlink_to(loop)
    dangling = tmp_path / "dangling.mp4"
    dangling.symlink_to(tmp_path / "deleted.mp4")
    os.mkfifo(tmp_path / "fifo")
    plan = plan_inputs([loop, dangling, tmp_path / "fifo", tmp_path / "missing.mp4"])
    assert dict(plan.skipped) == {
        str(loop): "symlink loop",
        str(dangling): f"dangling symlink (points to {tmp_path / 'deleted.mp4'}, which does not exist)",
        str(tmp_path / "fifo"): "not a regular file (a named pipe)",
        str(tmp_path / "missing.mp4"): "file not found",
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file: an unreadable file cannot be made")
def test_unreadable_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0)
    secret = tmp_path / "secret.wav"
    secret.write_bytes(media("audio/english.wav").read_bytes()[:1000])
    secret.chmod(0)
    try:
        reasons = dict(discover([tmp_path]).skipped)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert reasons[str(tmp_path / "locked")].startswith("unreadable folder")
    assert reasons[str(secret)] == "unreadable (permission denied)"


def test_control_characters_are_escaped() -> None:
    assert shown("a\nb") == "a\\nb"
    assert shown("x\x1b[31my") == "x\\x1b[31my"
    assert shown("tab\there") == "tab\\there"
    assert shown("plain name é.mp4") == "plain name é.mp4"


def test_ingest_prints_one_line_per_entry_and_escapes_names(messy: Path, tmp_path: Path, cache_dir: Path) -> None:
    """Only the broken entries (no media): the run ends before any model or Ray starts."""
    for good in ("jfk.flac", "again.flac", "sub/english.wav"):
        (messy / good).unlink()
    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(tmp_path / "index"), "MEDIAINDEX_CACHE_DIR": str(cache_dir),
           "MEDIAINDEX_TEMP_DIR": str(tmp_path / "t")}
    # -v: the entries that are simply not media (notes, .env, esc) are listed too, as "left out".
    result = subprocess.run([sys.executable, "-m", "mediaindex", "ingest", str(messy), "-v"], capture_output=True,
                            text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(("skipped ", "left out "))]
    assert len(lines) == 10, result.stderr  # gone, self, sub/up, pipe, notes, .env, bad\nname, esc, café, münchen
    assert sum(line.startswith("left out ") for line in lines) == 3, lines
    assert any("bad\\nname.mp4: dangling symlink" in line for line in lines), lines
    assert any("esc\\x1b[31m.txt: unsupported type" in line for line in lines), lines
    assert "\x1b[31m" not in result.stderr
    assert any(line.endswith(f"caf\\xe9.flac: {NOT_UTF8_NAME}") for line in lines), lines
    assert any(line.endswith("sub/up: symlink loop (points to a folder that contains it)") for line in lines)

    loop = tmp_path / "loop.mp4"
    loop.symlink_to(loop)
    alone = subprocess.run([sys.executable, "-m", "mediaindex", "ingest", str(loop)], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=300)
    assert f"skipped    {loop}: symlink loop" in alone.stderr and "not found" not in alone.stderr


def test_a_name_that_is_not_utf8_is_refused_by_what_reads_a_file_and_found_nowhere(messy: Path, tmp_path: Path) -> None:
    """`transcript`, `clip` and the stages probe a file first; lookups by such a name find nothing (SQLite cannot
    hold it) rather than fail."""
    from mediaindex.errors import MediaError
    from mediaindex.index.catalog import Catalog
    from mediaindex.media.probe import probe

    odd = messy / os.fsdecode(b"caf\xe9.flac")
    with pytest.raises(MediaError) as refused:
        probe(odd)
    assert str(refused.value) == f"{messy}/caf\\xe9.flac: {NOT_UTF8_NAME}"
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.by_source(str(odd)) is None and catalog.get(os.fsdecode(b"\xff")) is None
    catalog.close()


# Containers archives hold beyond the usual ones, made at test time from the shared recordings.
ARCHIVE_FORMATS = {  # name: (ffmpeg output options, from a video)
    "camcorder.m2ts": (["-c", "copy", "-f", "mpegts"], True),
    "dvd.vob": (["-c:v", "mpeg2video", "-c:a", "mp2", "-f", "vob"], True),
    "old.asf": (["-c:v", "wmv2", "-c:a", "wmav2", "-f", "asf"], True),
    "real.rm": (["-vf", "scale=320:240", "-c:v", "rv20", "-c:a", "ac3", "-f", "rm"], True),
    "tape.dv": (["-an", "-vf", "scale=720:576,fps=25", "-pix_fmt", "yuv420p", "-c:v", "dvvideo", "-f", "dv"], True),
    "book.m4b": (["-c:a", "aac", "-f", "ipod"], False),
    "music.mka": (["-c:a", "flac", "-f", "matroska"], False),
    "film.ac3": (["-c:a", "ac3", "-f", "ac3"], False),
    "memo.caf": (["-f", "caf"], False),
    "radio.mp2": (["-c:a", "mp2", "-f", "mp2"], False),
}


def test_media_in_the_formats_archives_hold_are_found_and_read(tmp_path: Path) -> None:
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe
    from mediaindex.media.probe import probe

    for name, (options, video) in ARCHIVE_FORMATS.items():
        source = media("video/cockatoo.mp4" if video else "audio/jfk.flac")
        subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-i", str(source), "-t", "3", *options,
                        str(tmp_path / name)], check=True)
    found = discover([tmp_path])
    assert sorted(p.name for p in found.files) == sorted(ARCHIVE_FORMATS) and not found.skipped
    for path in found.files:
        info = probe(path)
        assert info.has_video == ARCHIVE_FORMATS[path.name][1], path.name
        assert info.duration == pytest.approx(3.0, abs=0.3), path.name


def test_an_animated_gif_is_a_clip_and_a_single_picture_gif_is_left_out_of_a_walk(tmp_path: Path) -> None:
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe
    from mediaindex.media.probe import probe

    folder = tmp_path / "web"
    folder.mkdir()
    source = str(media("video/cockatoo.mp4"))
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-ss", "2", "-t", "2", "-i", source, "-vf",
                    "fps=8,scale=160:-1", str(folder / "parrot loop.gif")], check=True)
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-ss", "2", "-i", source, "-frames:v", "1", "-vf",
                    "scale=160:-1", str(folder / "logo.gif")], check=True)
    (folder / "damaged.gif").write_bytes(b"GIF89a" + os.urandom(64))  # the decoder judges it, with its reason
    found = discover([folder])
    assert sorted(p.name for p in found.files) == ["damaged.gif", "parrot loop.gif"]
    assert found.skipped == [(str(folder / "logo.gif"), "unsupported type (.gif: a still picture, not a clip)")]
    info = probe(folder / "parrot loop.gif")
    assert info.has_video and not info.has_audio and info.duration == pytest.approx(2.0, abs=0.2)
    # Given by name, a single picture is taken as given.
    assert [p.name for p in discover([folder / "logo.gif"]).files] == ["logo.gif"]
