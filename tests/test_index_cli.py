"""`mediaindex search` filters and modes, `index stats` / `optimize` / `reset`, run as a user runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mediaindex.cli import render
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from tests.conftest import assert_ranked, make_settings
from tests.corpus import manifesto, pictures, references
from tests.test_cli import run, search_in_process


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, embedder) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli-search")
    settings = make_settings(root / "index", cache_dir)
    segs = manifesto() + references() + pictures()
    for p in segs:
        p.vectors = {}  # text-only index, as the default configuration builds it
    vectors = embedder.embed_passages([s.text for s in segs])
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        rows: dict[str, list[int]] = {}
        for i, s in enumerate(segs):
            rows.setdefault(s.video_id, []).append(i)
        for r in rows.values():
            group = [segs[i] for i in r]
            index.replace_video(VideoRecord(group[0].video_id, group[0].source, group[0].video_id, 1, 1, None, "en",
                                            len(group), {}, 0.0), group, vectors[r])
    env = dict(os.environ)
    env["MEDIAINDEX_INDEX_DIR"] = str(settings.index_dir)
    env["MEDIAINDEX_CACHE_DIR"] = str(cache_dir)
    return env


def test_search_with_filters_and_modes(cli_index: dict[str, str]) -> None:
    audio = str(Path(references()[0].source).parent)
    result = run("search", "ask not what your country can do", "--json", "--under", audio, "--modality", "speech",
                 "--language", "en", "--from", "0:01", "--to", "9", "--limit", "3", env=cli_index)  # as the table
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert Path(hits[0]["source"]).name == "jfk.flac"
    assert all(h["source"].startswith(audio) and h["modality"] == "speech" for h in hits)
    assert_ranked([(h["score"], h["band"]) for h in hits])

    result = run("search", "antecedents", "--json", "--mode", "sparse", "--segments", env=cli_index)
    assert result.returncode == 0, result.stderr
    assert [Path(h["source"]).name for h in json.loads(result.stdout)] == ["2412-153948-0000.flac"]


def test_search_in_one_file_named_as_the_other_commands_name_it(cli_index: dict[str, str]) -> None:
    """--video takes what clip, transcript and summarize take: an id or its start, the ingested path, a file name."""
    query = "ask not what your country can do"
    every = json.loads(search_in_process(query, "--json", "--min-confidence", "none", "--limit", "50",
                                         env=cli_index).stdout)
    jfk = next(h for h in every if Path(h["source"]).name == "jfk.flac")
    for ref in ("jfk.flac", jfk["source"], jfk["video_id"], jfk["video_id"][:8]):
        hits = json.loads(search_in_process(query, "--json", "--min-confidence", "none", "--video", ref,
                                            env=cli_index).stdout)
        assert hits and {h["video_id"] for h in hits} == {jfk["video_id"]}, ref
    unknown = search_in_process(query, "--video", "nope.flac", env=cli_index)
    assert unknown.returncode == 2 and "nothing in the index is named 'nope.flac'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modality", "smell"], "unknown modality smell"),
        (["--from", "-5"], "--from '-5' is not a time: give seconds (83.5) or minutes:seconds (1:23.5)"),
        (["--to", "1:75"], "--to '1:75' is not a time"),
        (["--from", "inf"], "--from 'inf' is not a time"),
        (["--from", "10", "--to", "2"], "ends (2.0) before it starts (10.0)"),
        (["--mode", "fuzzy"], "unknown search mode"),
        (["--limit", "5000"], "--limit"),
        (["--by-file", "--segments"], "--by-file groups the moments of a text search"),
        (["--where", "tags"], "a metadata filter is KEY=VALUE (e.g. tags=physics), got 'tags'"),
        (["--where", "year=1", "--where", "year=2"], "metadata 'year' is given twice"),
    ],
)
def test_bad_search_options_are_refused_clearly(cli_index: dict[str, str], args: list[str], message: str) -> None:
    result = run("search", "anything", *args, env=cli_index)
    assert result.returncode != 0
    assert message in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr


def test_search_by_file_lists_each_file_once_with_its_best_moments(cli_index: dict[str, str]) -> None:
    query = "communism and the bourgeoisie"
    files = json.loads(search_in_process(query, "--by-file", "--json", "--min-confidence", "none", "--limit", "3",
                                         env=cli_index).stdout)
    moments = json.loads(search_in_process(query, "--json", "--min-confidence", "none", "--limit", "100",
                                           env=cli_index).stdout)
    assert len(files) == 3 and len({f["video_id"] for f in files}) == 3
    assert [f["video_id"] for f in files] == list(dict.fromkeys(h["video_id"] for h in moments))[:3]
    for f in files:
        assert f["count"] == sum(h["video_id"] == f["video_id"] for h in moments) and 1 <= len(f["moments"]) <= 3
        assert f["score"] == f["moments"][0]["score"] and all(Path(m["thumbnail"]).is_absolute()
                                                               for m in f["moments"] if m["thumbnail"])
    table = search_in_process(query, "--by-file", "--min-confidence", "none", "--limit", "3",
                              env={**cli_index, "COLUMNS": "90"})
    assert table.returncode == 0, table.stderr
    *headings, footer = [line for line in table.stdout.splitlines() if not line.startswith(" ")]
    assert footer == "the first 3 files; --limit 6 lists more"  # a full list may go on
    assert [h.split()[2] for h in headings] == [Path(f["source"]).name for f in files]
    manifesto = files[0]
    assert headings[0] == (f"{manifesto['band'] or '-'} {render.probability(manifesto['score'])}  manifesto.mp4  "
                           f"{manifesto['count']} moments (the best 3)")
    assert all(len(line) <= 90 for line in table.stdout.splitlines())
    nothing = search_in_process("xqzv plorth wimble", "--by-file", env=cli_index)
    assert nothing.returncode == 0 and nothing.stdout.startswith("no confident match; the closest moments")
    assert json.loads(search_in_process("xqzv plorth wimble", "--by-file", "--json", env=cli_index).stdout) == []


def test_a_full_list_says_how_to_list_more(cli_index: dict[str, str]) -> None:
    query = "communism and the bourgeoisie"
    every = json.loads(search_in_process(query, "--json", "--min-confidence", "none", "--limit", "1000",
                                         env=cli_index).stdout)
    assert len(every) > 2
    wide = {**cli_index, "COLUMNS": "120"}
    full = search_in_process(query, "--min-confidence", "none", "--limit", "2", env=wide)
    assert full.returncode == 0 and full.stdout.splitlines()[-1] == "the first 2 moments; --limit 4 lists more"
    narrow = search_in_process(query, "--min-confidence", "none", "--limit", "2", env={**cli_index, "COLUMNS": "60"})
    assert narrow.stdout.splitlines()[-1] == "the first 2 moments; --limit 4 lists more"
    segments = search_in_process(query, "--segments", "--min-confidence", "none", "--limit", "3", env=wide)
    assert segments.stdout.splitlines()[-1] == "the first 3 segments; --limit 6 lists more"
    # Everything listed, or JSON (what was asked for, nothing added): no such line.
    listed = search_in_process(query, "--min-confidence", "none", "--limit", str(len(every) + 1), env=wide)
    assert "lists more" not in listed.stdout and listed.stdout.count("manifesto.mp4") >= 1
    assert len(json.loads(search_in_process(query, "--json", "--min-confidence", "none", "--limit", "2",
                                            env=wide).stdout)) == 2


def test_like_takes_one_indexed_files_shot_and_says_what_is_wrong(cli_index: dict[str, str]) -> None:
    for args, message in [
        (["anything", "--like", "manifesto.mp4@3"], "give one of a text query, --image FILE or --like FILE@TIME"),
        (["--like", "@3"], "--like takes FILE@TIME"), (["--like", "manifesto.mp4"], "--like takes FILE@TIME"),
        (["--like", "manifesto.mp4@soon"], "--like's time 'soon' is not a time"),
        (["--like", "nope.mp4@3"], "nothing in the index is named 'nope.mp4'"),
        (["--like", "jfk.flac@3"], "no shot of that file at 3 s has a picture in the index"),
        (["--like", "manifesto.mp4@3", "--by-file"], "not with --image, --like or --segments"),
    ]:
        refused = search_in_process(*args, env=cli_index)
        assert refused.returncode == 2 and message in refused.stderr.replace("\n", " "), (args, refused.stderr)


def test_a_clip_of_an_indexed_file_named_by_its_name(cli_index: dict[str, str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mediaindex.cli import app
    from mediaindex.media.probe import probe

    result = CliRunner().invoke(app, ["clip", "manifesto.mp4", "0:12.5", "14", "-o", str(tmp_path / "m.mp4")],
                                env=cli_index)
    assert result.exit_code == 0, result.stderr
    assert probe(tmp_path / "m.mp4").has_video and probe(tmp_path / "m.mp4").duration == pytest.approx(1.5, abs=0.1)
    missing = CliRunner().invoke(app, ["clip", "nope.mp4", "1", "2"], env=cli_index)
    assert missing.exit_code == 2 and "nothing in the index is named 'nope.mp4'" in missing.stderr


def test_commands_that_only_read_the_index_never_load_the_embedder(cli_index: dict[str, str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Stats, the file list and a stored transcript need no model: with the embedder unloadable they answer, and a
    search says why it cannot, without a traceback."""
    from typer.testing import CliRunner

    from mediaindex.cli import app
    from mediaindex.errors import ModelLoadError
    from mediaindex.models import text_embed

    def unloadable(*args: object, **kwargs: object) -> None:
        raise ModelLoadError("the text embedder is not here (run `mediaindex models fetch`)")

    monkeypatch.setattr(text_embed, "load_text_embedder", unloadable)
    runner = CliRunner()
    stats = runner.invoke(app, ["index", "stats", "--json"], env=cli_index)
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["files"] == 11
    listed = runner.invoke(app, ["index", "list", "--json"], env=cli_index)
    assert listed.exit_code == 0, listed.output
    assert "manifesto.mp4" in {Path(f["source"]).name for f in json.loads(listed.stdout)}
    said = runner.invoke(app, ["transcript", "manifesto.mp4", "--format", "txt"], env=cli_index)
    assert said.exit_code == 0, said.output
    assert said.stdout.startswith("this audiobook is in the public domain\n")
    search = runner.invoke(app, ["search", "a deer"], env=cli_index)
    assert search.exit_code == 2 and "the text embedder is not here" in search.stderr
    assert search.exception is None or isinstance(search.exception, SystemExit)


def test_stats_optimize_and_a_stale_schema(cli_index: dict[str, str], tmp_path: Path) -> None:
    result = run("index", "stats", "--json", env=cli_index)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["files"] == 11 and stats["points"] == stats["speech_segments"] + stats["visual_segments"]
    assert stats["backend"] == "edge" and "video_id" in stats["payload_indexes"]

    result = run("index", "optimize", env=cli_index)
    assert result.returncode == 0, result.stderr
    assert f"{stats['points']} segments" in result.stdout

    old = tmp_path / "old-index"
    old.mkdir()
    (old / "schema.json").write_text(json.dumps({"schema_version": 1, "text_dim": 384, "embedder": "x"}))
    result = run("search", "anything", "--index", str(old), env=cli_index)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"mediaindex index reset --index {old}" in result.stderr.replace("\n", "")
