"""What the CLI says, read as a person reads it: counts and plurals, files left out, roles, absolute paths.

Ingest runs as a separate process, once plainly (stderr to a pipe) and once on a pseudo-terminal, where rich
draws its live display and wraps lines to the terminal's width.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mediaindex.cli.progress import summary_line
from mediaindex.cli.render import job_lines, plural
from mediaindex.segments import ANALYSIS_ADDS
from tests.conftest import REPO, cli_environment, media
from tests.test_cli import run
from tests.test_index_cli import cli_index  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # waits on the `mediaindex` processes it runs
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def run_on_terminal(*args: str, env: dict[str, str], columns: int = 200, timeout: float = 300) -> str:
    """The command's output as a terminal shows it (escape codes removed)."""
    leader, follower = pty.openpty()
    term_env = {**env, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm-256color"}
    term_env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "mediaindex", *args], stdin=follower, stdout=follower,
                            stderr=follower, env=term_env, cwd=REPO, close_fds=True)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the follower side closed: the process is gone
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-4000:]
    return ANSI.sub("", b"".join(chunks).decode(errors="replace"))


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, dict[str, str]]:
    """A folder as people have them: a recording beside a picture and subtitles of a video not there."""
    folder = tmp_path_factory.mktemp("archive")
    shutil.copy(media("audio/jfk.flac"), folder / "jfk.flac")
    shutil.copy(media("images/skimage_coffee.png"), folder / "coffee.png")
    shutil.copy(media("groundtruth/manifesto.srt"), folder / "manifesto.srt")
    return folder, cli_environment(tmp_path_factory.mktemp("out-index"), cache_dir, tmp_path_factory.mktemp("out-tmp"))


def test_counts_read_as_sentences() -> None:
    assert plural(1, "segment") == "1 segment" and plural(84, "segment") == "84 segments"
    assert plural(0, "file") == "0 files" and plural(2, "summary", "summaries") == "2 summaries"
    line = summary_line(indexed=1, segments=1, summarised=0, unchanged=0, skipped=0, failed=0, left_out=0, job_id="j")
    assert line == "done: 1 file indexed (1 segment) (job j)"
    line = summary_line(indexed=0, segments=0, summarised=0, unchanged=3, skipped=0, failed=0, left_out=0, job_id="j")
    assert line == "done: 3 already indexed (job j)"  # no "0 failed or skipped" after three unchanged lines
    line = summary_line(indexed=2, segments=84, summarised=0, unchanged=0, skipped=1, failed=1, left_out=1, job_id="j")
    assert line == ("done: 2 files indexed (84 segments), 1 skipped, 1 failed, 1 file left out as not media "
                    "(-v lists them) (job j)")
    line = summary_line(indexed=0, segments=0, summarised=0, unchanged=0, skipped=0, failed=0, left_out=0, job_id="j",
                        globbed=12)
    assert line == "done: 12 media files left out by --include/--exclude (job j)"  # not a bare "nothing to index"


def test_a_metadata_key_no_file_has_is_named_with_the_keys_they_have() -> None:
    from mediaindex.cli.render import unknown_keys

    files = [{"tags": ["politics"], "title": "Inaugural"}, {"source_url": "https://example.org/a", "year": None}]
    assert unknown_keys(files, (("tags", "x"), ("title", "y"))) is None  # each key is held: the values decide
    assert unknown_keys(files, (("Tags", "x"),)) == ("no indexed file has the metadata key 'Tags' (the keys they "
                                                      "have: source_url, tags, title)")  # a key taken away is not held
    assert unknown_keys(files, (("year", "1"), ("tags", "x"), ("Lang", "de"))) == (
        "no indexed file has the metadata keys 'year', 'Lang' (the keys they have: source_url, tags, title)")
    assert unknown_keys([{}, {}], (("tags", "x"),)) == ("no indexed file has the metadata key 'tags' (no file was "
                                                         "indexed with metadata)")


def test_ingest_names_every_file_and_counts_once(archive: tuple[Path, dict[str, str]]) -> None:
    folder, env = archive
    result = run("ingest", str(folder), "-v", env=env)
    assert result.returncode == 0, result.stderr
    text = result.stderr.replace("\n ", " ")
    indexed = re.search(r"indexed +(\S+jfk\.flac): (\d+) segments?\b", text)
    assert indexed and indexed.group(1) == str(folder.resolve() / "jfk.flac"), text
    n = int(indexed.group(2))
    assert f": {plural(n, 'segment')}" in text
    # The picture and the subtitles of no media file are not media: listed with -v, counted in the last line.
    assert f"left out   {folder / 'coffee.png'}: unsupported type (.png)" in text, text
    assert (f"left out   {folder / 'manifesto.srt'}: unsupported type (.srt: subtitles of no media file found "
            "here)") in text
    done = next(line for line in result.stderr.splitlines() if line.startswith("done: "))
    assert done.startswith(f"done: 1 file indexed ({plural(n, 'segment')}), 2 files left out as not media (job"), done
    assert "failed" not in done and "skipped" not in done
    # The same job, as a server runs it, is told in the same words (the server's job record has no segment counts).
    job_id = done.rsplit("(job ", 1)[1].rstrip(")")
    job = json.loads(run("jobs", job_id, "--json", env=env).stdout)
    told = job_lines(job, verbose=True)
    assert told[-1] == f"done: 1 file indexed, 2 files left out as not media (job {job_id})", told
    assert f"left out   {folder / 'coffee.png'}: unsupported type (.png)" in told
    assert any(line.startswith(f"indexed    {folder.resolve() / 'jfk.flac'}") for line in told), told

    quiet = run("ingest", str(folder), env=env)  # without -v: counted, not listed
    assert quiet.returncode == 0, quiet.stderr
    assert "coffee.png" not in quiet.stderr
    done = next(line for line in quiet.stderr.splitlines() if line.startswith("done: "))
    assert done.startswith("done: 1 already indexed, 2 files left out as not media (-v lists them)"), done
    assert "unchanged" in quiet.stderr and "skipped" not in quiet.stderr

    # On a terminal (rich's live display, colours, width): the same words, each file on one line.
    shown = run_on_terminal("ingest", str(folder), "-v", env=env)
    assert f"unchanged  {folder.resolve() / 'jfk.flac'}: already indexed" in shown, shown
    assert f"left out   {folder / 'coffee.png'}: unsupported type (.png)" in shown
    assert "done: 1 already indexed, 2 files left out as not media (job" in shown
    assert "0 failed" not in shown and "Traceback" not in shown


def test_index_stats_and_models_take_the_index(archive: tuple[Path, dict[str, str]]) -> None:
    folder, env = archive
    index_dir = env["MEDIAINDEX_INDEX_DIR"]
    other = {k: v for k, v in env.items() if k != "MEDIAINDEX_INDEX_DIR"}
    stats = run("index", "stats", "--index", index_dir, env=other)
    assert stats.returncode == 0, stats.stderr
    numbers = json.loads(run("index", "stats", "--json", "--index", index_dir, env=other).stdout)
    first = stats.stdout.splitlines()[0]
    assert first.startswith(f"1 file, {plural(numbers['points'], 'segment')} in "), first
    # The store's internal segment count is named as such, never a bare "segments: 1" beside ours.
    assert not re.search(r"^\s*segments:", stats.stdout, re.M), stats.stdout
    assert f"storage segments: {numbers['segments']}" in stats.stdout
    assert f"speech {numbers['speech_segments']}" in stats.stdout

    models = run("models", "--index", index_dir, env=other)
    assert models.returncode == 0, models.stdout + models.stderr
    rows = {line.split("│")[1].strip(): line for line in models.stdout.splitlines() if line.count("│") >= 3}
    for role in ("speech", "text embedding", "ocr", "image classes", "people", "text-image (CLIP)"):
        assert role in rows, models.stdout
    language = next(line for role, line in rows.items() if role.startswith("language"))
    assert "smollm2" in language and "ok" in language, models.stdout
    assert "off" in rows["text-image (CLIP)"] and "off (vision.people)" in rows["people"]
    on = run("models", "--index", index_dir, env={**other, "MEDIAINDEX_VISION__PEOPLE": "true"})
    assert on.returncode == 0 and "BlazeFace" in on.stdout, on.stdout + on.stderr
    assert numbers["files_by_earlier_version"] == 0 and "earlier version" not in stats.stdout


def test_a_file_indexed_by_an_earlier_version_is_told_and_reindexed(archive: tuple[Path, dict[str, str]]) -> None:
    """An index written before files carried their analysis version and metadata (its catalog without those
    columns): ingest
    says such a file is from an earlier version, stats counts it, and `--reindex` indexes it again in place."""
    import sqlite3

    folder, env = archive
    index_dir = Path(env["MEDIAINDEX_INDEX_DIR"])
    before = json.loads(run("index", "stats", "--json", env=env).stdout)
    with sqlite3.connect(index_dir / "catalog.db") as db:
        db.execute("ALTER TABLE videos DROP COLUMN analysis")
        db.execute("ALTER TABLE videos DROP COLUMN metadata")
    db.close()
    jfk = folder.resolve() / "jfk.flac"

    plain = run("ingest", str(folder), env=env)
    assert plain.returncode == 0, plain.stderr
    assert (f"unchanged  {jfk}: already indexed, by an earlier version (--reindex indexes it again: {ANALYSIS_ADDS})"
            ) in plain.stderr.replace("\n", ""), plain.stderr
    assert "done: 1 already indexed" in plain.stderr
    stats = run("index", "stats", env=env)
    assert ("1 file indexed by an earlier version: `mediaindex ingest --reindex` with their files or folders "
            "indexes them again") in stats.stdout.replace("\n", " "), stats.stdout
    assert json.loads(run("index", "stats", "--json", env=env).stdout)["files_by_earlier_version"] == 1

    redone = run("ingest", str(folder), "--reindex", env=env)
    assert redone.returncode == 0, redone.stderr
    assert re.search(rf"indexed +{re.escape(str(jfk))}: \d+ segments?", redone.stderr.replace("\n", "")), redone.stderr
    after = json.loads(run("index", "stats", "--json", env=env).stdout)
    assert (after["files"], after["points"], after["files_by_earlier_version"]) == (1, before["points"], 0), after
    settled = run("ingest", str(folder), env=env)
    assert f"unchanged  {jfk}: already indexed\n" in settled.stderr, settled.stderr

    refused = run("ingest", "--resume", "abc", "--reindex", env=env)
    assert refused.returncode != 0 and "give --reindex when starting it" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def test_search_json_gives_absolute_thumbnails(cli_index: dict[str, str]) -> None:  # noqa: F811
    result = run("search", "a cat", "--modality", "visual", "--json", "--limit", "3", env=cli_index)
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert hits and all(h["thumbnail"] for h in hits)
    thumbs = Path(cli_index["MEDIAINDEX_INDEX_DIR"]) / "thumbs"
    for h in hits:
        assert Path(h["thumbnail"]).is_absolute() and Path(h["thumbnail"]).parent.parent == thumbs, h["thumbnail"]


def test_a_picture_without_words_says_so_in_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from mediaindex.cli.render import hits, picture_without_words

    picture = {"source": "/media/street.mp4", "start": 20.1, "end": 37.7, "modality": "visual", "text": "",
               "score": 0.0, "band": None, "thumbnail": None}
    said = {**picture, "modality": "speech", "text": "", "start": 1.0, "end": 2.0}
    hits([], False, tmp_path, closest=[picture, said])
    shown = capsys.readouterr().out
    assert "no confident match" in shown and "street.mp4" in shown
    assert shown.count("(picture without words)") == 1  # a moment of speech without text is not a picture
    # With the classes that placed it, the table says what it looks like.
    hits([{**picture, "score": 0.3, "band": "low", "looks_like": ["hay", "military aircraft", "radio telescope"]}],
         False, tmp_path)
    table = capsys.readouterr().out
    assert "looks like" in table and "hay," in table and "military" in table and "telescope)" in table
    expected = "(picture without words; looks like hay, radio telescope)"
    assert picture_without_words(["hay", "radio telescope"]) == expected
    assert picture_without_words([]) == picture_without_words(None) == "(picture without words)"


def test_narrow_lists_wrap_wide_characters_within_the_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Korean, Chinese and Japanese characters take two cells: a narrow terminal's lines keep to its width and
    every continuation keeps its indent (counted in characters, the lines ran past the edge and wrapped to column 0)."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from mediaindex.cli import render

    source = tmp_path / "강의.wav"
    source.write_bytes(b"")
    said = {"source": str(source), "start": 13.7, "end": 19.0, "modality": "speech", "score": 0.45,
            "band": "medium", "thumbnail": None, "speaker": "S1",
            "text": "예를 들어 미국에서 영어를 사용하는 콜센터에 대한 프로젝트를 만들 수 있습니다. 我们明天在图书馆见面讨论这个项目"}
    for width in (50, 70, 90):
        screen = io.StringIO()
        monkeypatch.setattr(render, "out", Console(file=screen, width=width, color_system=None))
        render.hits([said], False, tmp_path)
        render.files([{"source": said["source"], "band": "medium", "score": 0.45, "count": 1, "moments": [said]}],
                     False, tmp_path)
        lines = screen.getvalue().splitlines()
        assert all(cell_len(line) <= width for line in lines), (width, lines)
        heading = [i for i, line in enumerate(lines) if not line.startswith(" ")]
        assert len(heading) == 2 and all(lines[i].startswith("    ") for i in range(len(lines)) if i not in heading)
        shown = "".join(line.strip() for line in lines)
        assert "콜센터에대한프로젝트를" in shown.replace(" ", "") and "图书馆见面" in shown


_READING_IMPORTS = """
import sys
import mediaindex.cli.app, mediaindex.service.archive, mediaindex.service.remote
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("scenedetect", "cv2", "ray")
                      or m.startswith(("mediaindex.pipeline.stages", "mediaindex.workers", "mediaindex.agents.ask",
                                       "mediaindex.agents.schema", "mediaindex.agents.jobs")))))
"""


def test_the_modules_a_reading_command_imports_leave_the_stages_the_agents_and_ray_out() -> None:
    # Each costs a one-shot command a part of its start (index stats ~0.5 s with them out, ~0.7 s with them in).
    done = subprocess.run([sys.executable, "-c", _READING_IMPORTS], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
