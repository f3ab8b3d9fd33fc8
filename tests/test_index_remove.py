"""Taking files out of an index: `mediaindex index remove` (by id, start of an id, path, folder, name, or every
file gone from disk) and `DELETE /videos/{id}`, on an index of real recordings copied into a folder of the test's
own (so that files can be deleted from disk)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mediaindex.config import ApiSettings, Settings
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.naming import NoSuchFileError, files_named, one_file_named, select_files
from mediaindex.media.thumbnails import save_thumbnails, thumbnail_name
from tests.conftest import make_settings, media
from tests.corpus import references

SPOKEN = ["talks/jfk.flac", "talks/2412-153948-0000.flac", "old/LJ002-0035.wav"]


@dataclass
class Archive:
    settings: Settings
    folder: Path
    ids: dict[str, str]  # path below the folder → video id

    def env(self) -> dict[str, str]:
        return {"MEDIAINDEX_INDEX_DIR": str(self.settings.index_dir), "MEDIAINDEX_CACHE_DIR": str(self.settings.cache_dir)}

    def indexed(self) -> list[str]:
        catalog = Catalog(self.settings.index_dir / "catalog.db")
        try:
            return [str(Path(r.source).relative_to(self.folder)) for r in catalog.all()]
        finally:
            catalog.close()


def build(root: Path, cache_dir: Path, embedder, files: list[str]) -> Archive:
    """An index of the reference transcripts of `files` (paths below `root / media`, named as a sample file),
    each file a copy of that sample, each with a thumbnail."""
    settings = make_settings(root / "index", cache_dir)
    ids: dict[str, str] = {}
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        for rel in files:
            target = root / "media" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            segs = [s for s in references() if Path(s.source).name == target.name]
            shutil.copyfile(segs[0].source, target)
            video_id = re.sub(r"\W", "", rel)[:16]
            for s in segs:
                s.source, s.video_id, s.vectors = str(target), video_id, {}
            save_thumbnails(settings.thumbs_dir, {thumbnail_name(video_id, 0.0): media("images/CLIP.png").read_bytes()})
            record = VideoRecord(video_id, str(target), video_id, target.stat().st_size, 1, segs[-1].end, "en",
                                 len(segs), {}, 0.0)
            index.replace_video(record, segs, embedder.embed_passages([s.text for s in segs]))
            ids[rel] = video_id
    return Archive(settings, root / "media", ids)


@pytest.fixture
def archive(tmp_path: Path, cache_dir: Path, embedder) -> Archive:
    return build(tmp_path, cache_dir, embedder, SPOKEN)


def cli(archive: Archive, *args: str, answer: str | None = None):
    from mediaindex.cli import app

    return CliRunner().invoke(app, list(args), env=archive.env(), input=answer)


def said(result) -> str:
    return " ".join((result.stdout + result.stderr).split())


def test_references_name_files_by_id_path_folder_and_name() -> None:
    @dataclass(frozen=True)
    class Row:
        video_id: str
        source: str

    rows = [Row("a1b2c3", "/archive/talks/jfk.flac"), Row("a1ffff", "/archive/old/jfk.flac"),
            Row("d4e5f6", "/archive/talks/speech.wav")]
    assert files_named(rows, "a1b2c3") == ([rows[0]], False)
    assert files_named(rows, "/archive/old/jfk.flac") == ([rows[1]], False)
    assert files_named(rows, "/archive/talks/../old/jfk.flac") == ([rows[1]], False)
    assert files_named(rows, "/archive/talks", folders=True) == ([rows[0], rows[2]], False)
    assert files_named(rows, "/archive/talks/", folders=True) == ([rows[0], rows[2]], False)
    assert files_named(rows, "/archive/tal", folders=True) == ([], True)  # a folder is whole names, not a prefix
    assert files_named(rows, "/archive/talks") == ([], True)  # folders only where asked for
    assert files_named(rows, "a1") == ([rows[0], rows[1]], True)
    assert files_named(rows, "speech.wav") == ([rows[2]], True)
    assert files_named(rows, "  ") == ([], False)

    assert select_files(rows, ["d4e5", "/archive/old"]) == [rows[1], rows[2]]  # listing order, each once
    assert select_files(rows, ["/archive/old/jfk.flac", "a1ffff"]) == [rows[1]]
    assert select_files(rows, [], missing=True) == rows  # none of these paths exists
    with pytest.raises(NoSuchFileError, match="'jfk.flac' names 2 indexed files: /archive/talks/jfk.flac"):
        select_files(rows, ["speech.wav", "jfk.flac"])
    with pytest.raises(NoSuchFileError, match="nothing in the index is named 'zz'"):
        select_files(rows, ["d4e5f6", "zz"])

    assert one_file_named(rows, "speech.wav") is rows[2] and one_file_named(rows, "a1b") is rows[0]
    assert one_file_named(rows, "/archive/old/jfk.flac") is rows[1] and one_file_named(rows, "zz") is None
    with pytest.raises(NoSuchFileError, match="'a1' names 2 indexed files: .*give the path or the video id"):
        one_file_named(rows, "a1")


def test_a_name_two_indexed_files_share_is_refused_by_every_command(tmp_path: Path, cache_dir: Path, embedder) -> None:
    """transcript, search --video and the agents' lookup (ask --video, summarize) refuse it, naming both files."""
    from mediaindex.agents.tools import Archive as AgentArchive

    twins = build(tmp_path, cache_dir, embedder, ["talks/jfk.flac", "old/jfk.flac"])
    for args in (["transcript", "jfk.flac"], ["search", "my fellow Americans", "--video", "jfk.flac"]):
        result = cli(twins, *args)
        assert result.exit_code == 2 and "'jfk.flac' names 2 indexed files" in said(result), (args, said(result))
    assert cli(twins, "transcript", twins.ids["old/jfk.flac"], "-f", "txt").exit_code == 0
    with MediaIndex(twins.settings, embedder.dim, embedder.name) as index:
        lookup = AgentArchive(index, embedder)
        with pytest.raises(NoSuchFileError, match="'jfk.flac' names 2 indexed files"):
            lookup.resolve("jfk.flac")
        assert lookup.resolve(str(twins.folder / "old/jfk.flac")).video_id == twins.ids["old/jfk.flac"]


def test_remove_a_file_by_name_and_its_search_results_and_thumbnails_go(archive: Archive) -> None:
    jfk = archive.ids["talks/jfk.flac"]
    thumbs = archive.settings.thumbs_dir / jfk
    assert thumbs.is_dir()
    result = cli(archive, "index", "remove", "jfk.flac")
    assert result.exit_code == 0, said(result)
    assert said(result) == f"removed {archive.folder / 'talks/jfk.flac'} (2 segments, {jfk})"
    assert archive.indexed() == ["old/LJ002-0035.wav", "talks/2412-153948-0000.flac"]
    assert not thumbs.exists() and (archive.folder / "talks/jfk.flac").is_file()  # the media file stays

    found = cli(archive, "search", "ask not what your country can do for you", "--json", "--min-confidence", "none")
    assert found.exit_code == 0, said(found)
    assert json.loads(found.stdout) and "jfk.flac" not in found.stdout

    again = cli(archive, "index", "remove", jfk)
    assert again.exit_code == 2 and f"nothing in the index is named '{jfk}'" in said(again)


def test_a_folder_is_removed_after_a_confirmation(archive: Archive) -> None:
    talks = archive.folder / "talks"
    declined = cli(archive, "index", "remove", str(talks), answer="n\n")
    assert declined.exit_code == 1 and "take these 2 files out of the index?" in said(declined)
    assert f"{talks / 'jfk.flac'} ({archive.ids['talks/jfk.flac']})" in said(declined)
    assert len(archive.indexed()) == 3

    shutil.rmtree(talks)  # a folder gone from disk still names what was ingested from it
    result = cli(archive, "index", "remove", str(talks), "--yes", "--json")
    assert result.exit_code == 0, said(result)
    assert sorted(Path(f["source"]).name for f in json.loads(result.stdout)) == ["2412-153948-0000.flac", "jfk.flac"]
    assert archive.indexed() == ["old/LJ002-0035.wav"]


def test_files_gone_from_disk_are_counted_and_removed(archive: Archive) -> None:
    (archive.folder / "talks/jfk.flac").unlink()
    found = cli(archive, "search", "ask not what your country can do for you")
    assert found.exit_code == 0 and "jfk.flac (gone from disk)" in said(found), said(found)
    stats = cli(archive, "index", "stats")
    assert stats.exit_code == 0, said(stats)
    assert "gone from disk: 1 file (`mediaindex index remove --missing` takes them out of the index)" in said(stats)
    assert json.loads(cli(archive, "index", "stats", "--json").stdout)["files_missing"] == 1

    result = cli(archive, "index", "remove", "--missing", "--json")
    assert result.exit_code == 0, said(result)
    assert json.loads(result.stdout) == [{"video_id": archive.ids["talks/jfk.flac"],
                                          "source": str(archive.folder / "talks/jfk.flac"), "segments": 2}]
    nothing = cli(archive, "index", "remove", "--missing")
    assert nothing.exit_code == 0 and said(nothing) == "nothing to remove: every indexed file is still at its path"
    assert "gone from disk" not in said(cli(archive, "index", "stats"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name the files to remove (a video id or its start, a path, a folder or a file name), or give --missing"),
        (["nosuch.wav"], "nothing in the index is named 'nosuch.wav'"),
        (["LJ002-0035.wav", "nosuch.wav"], "nothing in the index is named 'nosuch.wav'"),  # nothing removed either
        (["jfk.flac"], "'jfk.flac' names 2 indexed files"),
        (["   "], "nothing in the index is named ' ' (give"),  # said() folds the blanks
        (["x" * 5000], "nothing in the index is named '" + "x" * 79 + "…' (give"),  # quoted cut, not echoed whole
        (["--index", "/nonexistent/index", "LJ002-0035.wav"], "no index at /nonexistent/index"),
    ],
)
def test_bad_references_are_refused_and_remove_nothing(tmp_path: Path, cache_dir: Path, embedder,
                                                       args: list[str], message: str) -> None:
    archive = build(tmp_path, cache_dir, embedder, ["talks/jfk.flac", "old/jfk.flac", "old/LJ002-0035.wav"])
    result = cli(archive, "index", "remove", *args)
    assert result.exit_code == 2 and message in said(result)
    assert len(archive.indexed()) == 3


def test_the_api_removes_a_file_and_deletes_an_uploaded_copy(tmp_path: Path, cache_dir: Path, embedder) -> None:
    from mediaindex.api import create_app

    # A file the server took as an upload lies in a folder of its own in the upload folder.
    archive = build(tmp_path, cache_dir, embedder, ["talks/jfk.flac", "old/LJ002-0035.wav",
                                                   "uploads/0123456789ab/LJ002-0035.wav"])
    upload = archive.folder / "uploads/0123456789ab/LJ002-0035.wav"
    settings = archive.settings.model_copy(update={"api": ApiSettings(
        media_roots=[archive.folder / "talks", archive.folder / "old"], upload_dir=archive.folder / "uploads",
        rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    with TestClient(create_app(settings, embedder=embedder), raise_server_exceptions=False) as client:
        jfk = archive.ids["talks/jfk.flac"]
        r = client.delete(f"/videos/{jfk}")
        assert r.status_code == 200, r.text
        assert {k: r.json()[k] for k in ("video_id", "title", "segments")} == {"video_id": jfk, "title": "jfk.flac",
                                                                                 "segments": 2}
        assert client.get(f"/videos/{jfk}").status_code == 404
        assert client.delete(f"/videos/{jfk}").json()["message"] == f"no video with id {jfk!r} in the index"
        assert client.delete("/videos/no%20such").status_code == 422
        hits = client.get("/search", params={"q": "ask not what your country can do", "min_confidence": "none"})
        assert hits.status_code == 200 and hits.json()["hits"]
        assert all(h["video_id"] != jfk for h in hits.json()["hits"])
        assert (archive.folder / "talks/jfk.flac").is_file()

        assert all(v["on_disk"] for v in client.get("/videos").json())
        (archive.folder / "old/LJ002-0035.wav").rename(archive.folder / "old/moved.wav")
        assert [v["on_disk"] for v in client.get("/videos").json()] == [False, True]  # old/…, then uploads/…
        found = client.get("/search", params={"q": "Eight, the press yard", "min_confidence": "none"}).json()["hits"]
        assert {(h["source"], h["on_disk"]) for h in found} == {(str(archive.folder / "old/LJ002-0035.wav"), False),
                                                               ("LJ002-0035.wav", True)}  # an upload by its name
        (archive.folder / "old/moved.wav").rename(archive.folder / "old/LJ002-0035.wav")

        assert client.delete(f"/videos/{archive.ids['uploads/0123456789ab/LJ002-0035.wav']}").status_code == 200
        assert not upload.parent.exists() and (archive.folder / "old/LJ002-0035.wav").is_file()
        assert [v["source"] for v in client.get("/videos").json()] == [str(archive.folder / "old/LJ002-0035.wav")]
