"""The CLI contract, run as a user runs it: a separate process per command (repeated searches of one index run
in-process through typer's CliRunner: the same command code, without a process start each)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_ranked, cli_environment, media

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # waits on the `mediaindex` processes it runs


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def search_in_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`mediaindex search ARGS` through typer's CliRunner, its result shaped as a finished process's."""
    from typer.testing import CliRunner

    from mediaindex.cli import app

    result = CliRunner().invoke(app, ["search", *args], env=env)
    return subprocess.CompletedProcess(["search", *args], result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("cli-index"), cache_dir, tmp_path_factory.mktemp("tmp"))


def test_ingest_then_search_json(cli_env: dict[str, str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_text("not media")
    result = run("ingest", str(media("audio/jfk.flac")), str(junk), env=cli_env)
    assert result.returncode == 0, result.stderr
    assert f"{junk}: not a readable media file" in result.stderr.replace("\n", " ")
    assert "done: 1 file indexed (" in result.stderr and ", 1 failed" in result.stderr

    result = run("search", "ask not what your country can do", "--json", "--limit", "2", env=cli_env)
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert 1 <= len(hits) <= 2
    best = hits[0]
    assert best["source"] == str(media("audio/jfk.flac"))
    assert {"source", "video_id", "start", "end", "score", "modality", "text"} <= set(best)
    assert isinstance(best["start"], float) and isinstance(best["end"], float)
    assert best["modality"] == "speech" and "country" in best["text"]
    assert_ranked([(h["score"], h["band"]) for h in hits])

    # Nothing confident: said plainly (exit 0) with the closest moments marked as such; an empty JSON list.
    result = search_in_process("quantum chromodynamics on a lattice", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert "no confident match" in result.stdout and "closest" in result.stdout and "Traceback" not in result.stderr
    result = search_in_process("xqzv plorth wimble", "--json", env=cli_env)
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stdout + result.stderr
    result = search_in_process("xqzv plorth wimble", "--json", "--min-confidence", "none", "--limit", "1", env=cli_env)
    assert result.returncode == 0 and len(json.loads(result.stdout)) == 1, result.stdout + result.stderr
    result = search_in_process("ask not what your country can do", "--min-confidence", "high", env=cli_env)
    assert result.returncode == 0 and "high" in result.stdout  # the band column
    # A question is searched as written.
    result = search_in_process("Who says ask not what your country can do?", env=cli_env)
    assert result.returncode == 0 and "jfk.flac" in result.stdout, result.stderr

    # the --index flag wins over the environment
    other = tmp_path / "empty-index"
    result = search_in_process("anything", "--index", str(other), env=cli_env)
    assert result.returncode != 0 and "no index" in result.stderr


def test_ingesting_a_folder_again_says_which_files_are_gone(cli_env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    for name in ("LJ002-0020.wav", "LJ002-0035.wav"):
        shutil.copyfile(media(f"audio/{name}"), folder / name)
    result = run("ingest", str(folder), env=cli_env)
    assert result.returncode == 0 and "gone from disk" not in result.stderr, result.stderr

    (folder / "LJ002-0035.wav").unlink()
    result = run("ingest", str(folder), env=cli_env)
    assert result.returncode == 0, result.stderr
    assert " ".join(result.stderr.split()).endswith(
        "1 file indexed from these folders earlier is gone from disk: `mediaindex index remove --missing` takes "
        "them out of the index")
    result = run("index", "remove", "--missing", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert " ".join(result.stdout.split()).startswith(f"removed {folder / 'LJ002-0035.wav'} (1 segment, ")


def test_watch_indexes_new_files_follows_moved_ones_and_says_which_are_gone(cache_dir: Path,
                                                                           tmp_path: Path) -> None:
    """`ingest FOLDER --watch 1`: a file copied in is indexed once it has stopped changing, a file renamed into
    a new folder keeps its segments, a file deleted is said to be gone; searches read through the watcher
    meanwhile; Ctrl-C stops it (exit 0)."""
    env = cli_environment(tmp_path / "index", cache_dir, tmp_path / "t")
    folder = tmp_path / "archive"
    folder.mkdir()
    shutil.copyfile(media("audio/LJ002-0035.wav"), folder / "LJ002-0035.wav")
    log = tmp_path / "watch.log"
    with log.open("w") as out:
        watcher = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", str(folder), "--watch", "1"],
                                   env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def said() -> str:
        return " ".join(log.read_text().split())

    def wait_for(text: str) -> None:
        deadline = time.monotonic() + 180
        while text not in said():
            assert watcher.poll() is None and time.monotonic() < deadline, said()
            time.sleep(0.3)

    try:
        wait_for("(Ctrl-C stops)")
        (folder / "sub").mkdir()
        shutil.copyfile(media("audio/english.wav"), folder / "sub" / "english.wav")
        (folder / "LJ002-0035.wav").rename(folder / "sub" / "press.wav")
        wait_for(f"indexed {folder / 'sub' / 'english.wav'}: ")
        assert (f"unchanged {folder / 'sub' / 'press.wav'}: moved from {folder / 'LJ002-0035.wav'}; its segments "
                "follow it") in said()
        assert "gone from disk" not in said()  # a file being moved is not gone
        found = run("search", "one two three", "--json", "--limit", "1", env=env)
        assert found.returncode == 0 and json.loads(found.stdout)[0]["source"] == str(folder / "sub" / "english.wav")
        assert "reading through `mediaindex ingest`" in found.stderr

        (folder / "sub" / "english.wav").unlink()
        wait_for("1 file indexed from the watched folders is gone from disk: `mediaindex index remove --missing`")
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == 0, said()
        assert said().endswith("stopped watching") and "Traceback" not in said()
    finally:
        if watcher.poll() is None:
            watcher.kill()


def test_nothing_indexable_exits_non_zero(cli_env: dict[str, str], tmp_path: Path) -> None:
    junk = tmp_path / "a.wav"
    junk.write_bytes(b"RIFF")
    result = run("ingest", str(junk), str(tmp_path / "missing.mp3"), env=cli_env)
    assert result.returncode == 1
    assert "missing.mp3: file not found" in result.stderr.replace("\n", " ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "   "], "query is empty"),
        (["search", ""], "query is empty"),
        (["search", "🙂🎉🚀"], "no letters or digits"),
        (["search", "x" * 10_000], "characters long"),
        (["search", os.fsdecode(b"caf\xe9")], "query is not UTF-8 text"),  # typed in a Latin-1 terminal
        (["ask", os.fsdecode(b"caf\xe9?")], "question is not UTF-8 text"),
        (["search", "--image", str(REPO / "pyproject.toml")], "not a readable image"),
        (["search", "--image", "no-such-picture.png"], "image file not found"),
        (["search", "x", "--limit", "0"], "--limit"),
        (["search", "x", "--min-confidence", "sure"], "unknown min_confidence"),
        (["search", "x", "--config", "nosuch"], "unknown config profile"),
        (["frobnicate"], "No such command"),
        (["ingest", "--watch", "5", "--manifest", str(REPO / "README.md")], "--watch keeps the files and folders"),
        (["ingest", str(media("audio")), "--watch", "0"], "--watch"),
        (["ingest", str(media("audio")), "--watch", "inf"], "less than or equal to 604800"),
        (["ingest", str(media("audio")), "no-such-folder", "--watch", "5"], "not found: no-such-folder"),
        (["serve", "--media-root", str(media("audio")), "--watch", "1e12"], "less than or equal to 604800"),
        (["serve", "--watch", "5"], "--watch watches the media roots: give --media-root FOLDER"),
        (["index", "list", "--where", "tags"], "a metadata filter is KEY=VALUE (e.g. tags=physics), got 'tags'"),
        (["ask", "what?", "--where", "a\\b=1"], "without quotes, '=', backslashes or control characters"),
        (["ingest", str(media("audio/jfk.flac")), "--index", str(REPO / "pyproject.toml")],
         f"the index path {REPO / 'pyproject.toml'} is a file, not a folder: give --index"),
        (["ingest", str(media("audio/jfk.flac")), "--index", str(REPO / "pyproject.toml" / "index")],
         f"cannot make the index folder {REPO / 'pyproject.toml' / 'index'} (Not a directory)"),
        (["serve", "--index", str(REPO / "pyproject.toml")], "is a file, not a folder: give --index"),
        (["ingest", "rtsp://camera.local/stream"],  # taken as a path, it was "file not found"
         "rtsp://camera.local/stream: rtsp:// addresses are not read; give a file, a folder or an http(s) address"),
        (["keys", "create", "ci", "--index", str(REPO / "pyproject.toml")],
         f"cannot open the API key store {REPO / 'pyproject.toml' / 'api_keys.db'} (File exists): give --index"),
    ],
)
def test_bad_flags_are_refused_clearly(cli_env: dict[str, str], args: list[str], message: str) -> None:
    result = run(*args, env=cli_env)
    assert result.returncode != 0
    assert message in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr


def test_models_lists_roles(cli_env: dict[str, str]) -> None:
    result = run("models", env=cli_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "speech" in result.stdout and "whisper-base" in result.stdout and "ok" in result.stdout
