"""An ingest through a server takes what a local ingest takes: manifest entries with their metadata and
include / exclude globs for folders; wrong inputs are refused before any job exists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.config import ApiSettings
from mediaindex.index.holder import Holder
from mediaindex.service.remote import Remote, RemoteArchive, RemoteError
from tests.conftest import MEDIA, make_settings, media
from tests.test_api import assert_error
from tests.test_api_jobs import wait_for_job
from tests.test_api_support import LiveServer, Sample, sample  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


@pytest.fixture
def app(sample: Sample, tmp_path: Path, cache_dir: Path) -> object:  # noqa: F811
    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(media_roots=[MEDIA], rate_limit_per_minute=0)})
    return create_app(settings, embedder=sample.embedder, pipeline=sample.pipeline)


@pytest.fixture
def client(app: object) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:  # type: ignore[arg-type]
        yield c


def _names(job: dict) -> list[str]:
    return [Path(f["path"]).name for f in job["files"]]


def test_globs_choose_the_files_of_a_folder(client: TestClient) -> None:
    flac = client.post("/ingest", json={"paths": ["audio"], "include": ["*.flac"], "exclude": ["chinese*"]})
    assert flac.status_code == 202, flac.text
    assert sorted(_names(flac.json())) == ["2412-153948-0000.flac", "jfk.flac"]
    assert client.delete(f"/jobs/{flac.json()['id']}").status_code in (200, 202)  # nothing needs to run here
    # A file named outright is taken as given; globs apply inside folders, as on the command line.
    named = client.post("/ingest", json={"paths": ["audio/english.wav"], "include": ["*.flac"]})
    assert named.status_code == 202 and _names(named.json()) == ["english.wav"]
    client.delete(f"/jobs/{named.json()['id']}")


def test_manifest_entries_carry_their_metadata_into_the_segments(client: TestClient) -> None:
    entry = {"path": str(media("audio/LJ002-0020.wav")), "metadata": {"title": "In 1813", "tags": ["prison"],
                                                                       "year": 1813, "public": True}}
    again = {"path": "audio/LJ002-0020.wav", "metadata": {"title": "named again"}}
    r = client.post("/ingest", json={"manifest": [entry, again]})
    assert r.status_code == 202, r.text
    assert _names(r.json()) == ["LJ002-0020.wav"]  # named twice, ingested once: the first mention's metadata
    job = wait_for_job(client, r.json()["id"])
    assert job["state"] == "done", job
    index = client.app.state.api.index  # type: ignore[attr-defined]
    segments = index.store.segments_of(job["result"]["video_ids"][0])
    assert segments
    for segment in segments:
        extra = segment["extra"]
        assert (extra["title"], extra["tags"], extra["year"], extra["public"]) == ("In 1813", ["prison"], 1813, True)
    # A boolean is asked for as JSON's true, or as "true" in KEY=VALUE; false or 1 finds nothing.
    video = job["result"]["video_ids"][0]
    for where in ({"public": True}, {"public": "true"}, {"public": "TRUE"}):
        hits = client.post("/search", json={"q": "prison", "filters": {"where": where},
                                            "min_confidence": "none"}).json()["hits"]
        assert hits and {h["video_id"] for h in hits} == {video}, (where, hits)
    for where in ({"public": False}, {"public": 1}):
        r = client.post("/search", json={"q": "prison", "filters": {"where": where}, "min_confidence": "none"})
        assert r.status_code == 200 and r.json()["hits"] == [], (where, r.text)
    assert [v["video_id"] for v in client.get("/library", params={"where": "public=true"}).json()["videos"]] \
        == [video]
    assert client.get("/library", params={"where": "public=false"}).json()["videos"] == []


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({}, 422, "nothing to ingest"),
        ({"paths": [], "manifest": []}, 422, "nothing to ingest"),
        ({"paths": ["audio"], "include": ["  "]}, 400, "glob is empty"),
        ({"paths": ["audio"], "include": [""]}, 422, "at least 1 character"),
        ({"paths": ["audio"], "include": ["*.nothing"]}, 400, "that the include/exclude globs let through"),
        ({"manifest": [{"path": "audio/jfk.flac", "metadata": {"path": "x"}}]}, 400, "cannot be used as a metadata key"),
        ({"manifest": [{"path": "audio/jfk.flac", "metadata": {"nested": {"a": 1}}}]}, 422, "metadata"),
        ({"manifest": [{"path": "audio/jfk.flac", "color": "red"}]}, 422, "Extra inputs"),
        ({"manifest": [{"path": "/etc/passwd"}]}, 403, ""),
        ({"paths": ["audio"], "summaries": "no"}, 422, "boolean"),
        ({"paths": ["audio"], "reindex": "yes"}, 422, "boolean"),
        ({"paths": ["audio"], "reindex": None}, 422, "boolean"),
    ],
)
def test_wrong_ingest_bodies_are_refused_and_create_no_job(client: TestClient, body: dict, status: int,
                                                           message: str) -> None:
    before = client.get("/jobs").json()
    r = client.post("/ingest", json=body)
    assert_error(r, status)
    assert message in json.dumps(r.json()), r.text
    assert client.get("/jobs").json() == before


def test_the_remote_archive_sends_manifest_files_and_globs(app: object, tmp_path: Path) -> None:
    manifest = tmp_path / "list.jsonl"
    manifest.write_text(json.dumps({"path": str(media("audio/LJ002-0035.wav")), "title": "Newgate"}) + "\n")
    with LiveServer(app) as server:
        remote = RemoteArchive(Remote(Holder(pid=0, command="mediaindex serve", url=server.url)))
        job = remote.ingest([], None, manifests=[manifest])
        assert job["state"] == "done" and _names(job) == ["LJ002-0035.wav"], job
        index = app.state.api.index  # type: ignore[attr-defined]
        segments = index.store.segments_of(job["result"]["video_ids"][0])
        assert segments and {s["extra"].get("title") for s in segments} == {"Newgate"}
        # Unchanged: left alone, unless re-indexed (its segments replaced, not added to).
        again = remote.ingest([], None, manifests=[manifest])
        assert again["result"]["unchanged"] == 1 and again["result"]["indexed"] == 0, again
        redone = remote.ingest([], None, manifests=[manifest], reindex=True)
        assert redone["state"] == "done" and redone["result"]["indexed"] == 1, redone
        assert len(index.store.segments_of(job["result"]["video_ids"][0])) == len(segments)
        with pytest.raises(RemoteError, match="glob is empty"):
            remote.ingest([MEDIA / "audio"], None, include=[" "])
        broken = tmp_path / "broken.csv"
        broken.write_text("file,title\na.mp4,A\n")
        with pytest.raises(Exception, match="'path' column"):  # read here, before anything is sent
            remote.ingest([], None, manifests=[broken])
