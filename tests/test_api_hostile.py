"""Hostile paths and names over HTTP: over-long paths are a 422 with a short message (never a 500 from the file
system), and an upload is shown by its own name, never by the index folder that keeps it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.config import ApiSettings
from tests.conftest import MEDIA, make_settings, media
from tests.test_api import assert_error

pytestmark = pytest.mark.slow


@pytest.fixture
def app_client(tmp_path: Path, cache_dir: Path, embedder) -> Iterator[TestClient]:
    """An app over a new, empty index whose job runner is not started: requests are answered, jobs wait."""
    from mediaindex.index.index import open_index

    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(
        media_roots=[MEDIA], rate_limit_per_minute=0, max_upload_bytes=2 * 1024**2)})
    index = open_index(settings, embedder.dim, embedder.name, thread_safe=True)
    try:
        # Outside a `with` block the app's start-up does not run: the index given is served as it is.
        yield TestClient(create_app(settings, index=index, embedder=embedder), raise_server_exceptions=False)
    finally:
        index.close()


DEEP = "/".join(["d" * 250] * 17)  # every name fits, the whole does not
FITS_ALONE = "/".join(["d" * 250] * 16) + "/" + "x" * 74 + ".wav"  # 4094 bytes: fits, but not below a media root


@pytest.mark.parametrize(("path", "words"), [
    ("a" * 10_000, "at most 4096 bytes"),
    ("x" * 300 + ".wav", "at most 255 bytes"),
    ("é" * 200 + ".wav", "at most 255 bytes"),  # 200 characters, 404 bytes
    ("audio/" + "y" * 256, "at most 255 bytes"),
    (DEEP, "at most 4096 bytes"),
    (FITS_ALONE, "cannot be looked up"),
])
def test_over_long_paths_are_a_422_with_a_short_message(app_client: TestClient, path: str, words: str) -> None:
    responses = [app_client.post("/ingest", json={"paths": [path]}), app_client.get(f"/files/{path}"),
                 app_client.get(f"/thumbs/{path}")]
    for r in responses:
        body = assert_error(r, 422)
        assert words in body["message"] or "4096 characters" in body["message"], body
        assert len(r.text) < 600, r.text  # the path is quoted cut short, not echoed whole
    assert app_client.get("/jobs").json() == []


def test_an_upload_is_shown_by_its_name_never_by_the_index_folder(app_client: TestClient, tmp_path: Path) -> None:
    data = media("audio/LJ002-0020.wav").read_bytes()
    name = "é" * 250 + ".wav"  # 255 characters, 504 bytes: more than a file name may have
    r = app_client.post("/ingest/upload", params={"filename": name}, content=data,
                        headers={"content-type": "application/octet-stream"})
    assert r.status_code == 202, r.text
    job = r.json()
    shown = job["files"][0]["path"]
    assert shown.endswith("é.wav") and "/" not in shown and len(shown.encode()) <= 255, shown
    stored = next((tmp_path / "index" / "uploads").rglob("*.wav"))
    assert stored.name == shown and stored.read_bytes() == data
    for answer in (r, app_client.get(f"/jobs/{job['id']}"), app_client.get("/jobs")):
        assert answer.status_code == 200 or answer is r
        assert str(tmp_path) not in answer.text and "uploads/" not in answer.text, answer.text
    assert app_client.get("/jobs").json()[0]["files"][0]["path"] == shown


def test_an_upload_name_over_the_limit_is_a_422(app_client: TestClient) -> None:
    r = app_client.post("/ingest/upload", params={"filename": "z" * 300 + ".wav"}, content=b"RIFF")
    assert_error(r, 422, "255 characters")
    assert not any(p.is_file() for p in app_client.app.state.api.upload_dir.rglob("*"))  # type: ignore[attr-defined]


def test_a_query_parameter_an_endpoint_does_not_read_is_a_422_naming_those_it_reads(app_client: TestClient) -> None:
    # Passed over, a misspelt filter would answer as if there were none.
    body = assert_error(app_client.get("/search", params={"q": "dog", "from": "30"}), 422)
    assert body["message"] == ("unknown query parameter 'from': /search reads from_seconds, language, limit, "
                               "min_confidence, modality, q, speaker, to_seconds, under, video_id, where")
    body = assert_error(app_client.get("/search/files", params={"q": "dog", "perfile": "2", "x": "1"}), 422)
    assert body["message"].startswith("unknown query parameters 'perfile', 'x': /search/files reads ")
    assert "per_file" in body["message"]
    assert assert_error(app_client.get("/jobs", params={"state": "done"}), 422)["message"] == (
        "unknown query parameter 'state': /jobs reads active, files, kind, limit")
    assert app_client.get("/search", params={"q": "dog", "from_seconds": "3", "where": "tags=x"}).status_code == 200
    assert app_client.get("/jobs", params={"kind": "ingest"}).status_code == 200


def test_a_body_that_is_not_json_is_a_422_saying_where_it_breaks(app_client: TestClient) -> None:
    for path in ("/search", "/ingest", "/ask"):
        r = app_client.post(path, content=b'{"q": "dog",', headers={"content-type": "application/json"})
        body = assert_error(r, 422)
        assert body["message"].startswith("body: not valid JSON at character 12"), body
        assert body["details"][0]["where"] == "body"
