"""Only media leaves the server: never dotfiles or the index's own files, whatever the media root;
every error is the same JSON shape and names no server folder; failed keys are rate limited."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api.keys import KeyStore
from tests.conftest import MEDIA, media
from tests.test_api import assert_error, make_client
from tests.test_api_support import Sample, sample  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(sample: Sample, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[TestClient]:  # noqa: F811
    """A media root that is like a home folder: media beside secrets, and the index inside it."""
    from mediaindex.api import create_app
    from mediaindex.config import ApiSettings
    from mediaindex.index.index import open_index
    from tests.conftest import make_settings

    root = tmp_path_factory.mktemp("home")
    (root / "media" / ".private").mkdir(parents=True)
    shutil.copy(media("audio/jfk.flac"), root / "media" / "talk.flac")  # copies: a link would lead out of the root
    shutil.copy(media("audio/english.wav"), root / "media" / ".private" / "hidden.wav")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    shutil.copy(media("audio/LJ002-0020.wav"), root / ".ssh" / "looks-like.wav")
    (root / ".env").write_text("SECRET=1")
    (root / "notes.txt").write_text("private notes")
    settings = make_settings(root / "idx", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(media_roots=[root], rate_limit_per_minute=0)})
    index = open_index(settings, sample.embedder.dim, sample.embedder.name, thread_safe=True)
    (root / "link-to-catalog.wav").symlink_to(root / "idx" / "catalog.db")
    try:
        with TestClient(create_app(settings, index=index, embedder=sample.embedder),
                        raise_server_exceptions=False) as c:
            KeyStore(root / "idx" / "api_keys.db").list()  # the keys database exists, under the root
            c.root = root  # type: ignore[attr-defined]
            c.index_name = "idx"  # type: ignore[attr-defined]
            yield c
    finally:
        index.close()


def test_media_under_the_root_is_served(home: TestClient) -> None:
    r = home.get("/files/media/talk.flac", headers={"Range": "bytes=0-3"})
    assert r.status_code == 206 and r.content == b"fLaC"


@pytest.mark.parametrize("name", [
    ".env", ".ssh/id_rsa", ".ssh/looks-like.wav", "media/.private/hidden.wav", "notes.txt", "link-to-catalog.wav",
    "{index}/catalog.db", "{index}/jobs.db", "{index}/api_keys.db", "{index}/schema.json", "{index}/holder.json",
    "{index}/qdrant", "{index}/holder.lock", "{index}/holder.sock",
])
def test_hidden_private_and_non_media_files_are_never_served(home: TestClient, name: str) -> None:
    name = name.format(index=home.index_name)  # type: ignore[attr-defined]
    r = home.get(f"/files/{name}")
    assert r.status_code in (400, 404), (name, r.status_code)
    assert_error(r, r.status_code)
    assert b"PRIVATE" not in r.content and b"SECRET" not in r.content and b"SQLite" not in r.content
    # Ingest over HTTP follows the same rule: no job, nothing read.
    before = len(home.get("/jobs").json())
    assert home.post("/ingest", json={"paths": [name]}).status_code in (400, 404)
    assert len(home.get("/jobs").json()) == before


def test_thumbnails_are_images_only(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    thumbs = sample.settings.thumbs_dir
    one = next(p for p in thumbs.rglob("*.jpg"))
    with make_client(sample, tmp_path) as c:
        assert c.get(f"/thumbs/{one.relative_to(thumbs).as_posix()}").status_code == 200
        (thumbs / ".hidden.jpg").write_bytes(one.read_bytes())
        (thumbs / "notes.txt").write_text("x")
        try:
            assert_error(c.get("/thumbs/.hidden.jpg"), 404)
            assert_error(c.get("/thumbs/notes.txt"), 404)
        finally:
            (thumbs / ".hidden.jpg").unlink()
            (thumbs / "notes.txt").unlink()


def test_a_folder_ingest_leaves_out_hidden_folders(home: TestClient) -> None:
    """A folder over HTTP takes its media only: media/.private/hidden.wav is not part of the job."""
    r = home.post("/ingest", json={"paths": ["media"]})
    assert r.status_code == 202, r.text
    files = [Path(f["path"]).name for f in r.json()["files"]]
    assert files == ["talk.flac"]  # hidden.wav left out
    assert home.delete(f"/jobs/{r.json()['id']}").status_code in (200, 202)


def test_range_errors_are_json(home: TestClient) -> None:
    size = (home.root / "media" / "talk.flac").stat().st_size  # type: ignore[attr-defined]
    body = assert_error(home.get("/files/media/talk.flac", headers={"Range": "bytes=abc"}), 400, "Range")
    assert body["error"] == "bad_request"
    r = home.get("/files/media/talk.flac", headers={"Range": f"bytes={size + 5}-"})
    assert_error(r, 416, "outside")
    assert r.headers["content-range"] == f"bytes */{size}"
    assert_error(home.get("/files/media/talk.flac", headers={"Range": "items=0-1"}), 400)


def test_a_chunked_body_over_the_limit_is_413(home: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length
        for _ in range(30):
            yield b" " * 100_000

    r = home.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "limit")


def test_errors_name_no_server_folder(home: TestClient, sample: Sample) -> None:  # noqa: F811
    import tempfile

    broken = home.post("/search/image", content=b"\x89PNG\r\n\x1a\n broken", headers={"content-type": "image/png"})
    assert broken.status_code == 422
    for folder in (tempfile.gettempdir(), str(sample.settings.index_dir), str(sample.settings.cache_dir)):
        assert folder not in broken.text
    ready = home.get("/health/ready").text
    assert str(sample.settings.index_dir) not in ready


def test_not_ready_names_no_index_path(tmp_path: Path, cache_dir: Path, sample: Sample) -> None:  # noqa: F811
    from mediaindex.api import create_app
    from tests.conftest import make_settings

    index_dir = tmp_path / "secret-place" / "index"
    index_dir.mkdir(parents=True)
    (index_dir / "schema.json").write_text('{"schema_version": 999}')
    with TestClient(create_app(make_settings(index_dir, cache_dir), embedder=sample.embedder),
                    raise_server_exceptions=False) as c:
        r = c.get("/health/ready")
        assert r.status_code == 503 and "schema" in r.text
        assert "secret-place" not in r.text and str(tmp_path) not in r.text
        assert "secret-place" not in c.get("/search", params={"q": "x"}).text


def test_failed_key_attempts_count_against_the_client(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    with make_client(sample, tmp_path, rate_limit_per_minute=6, rate_limit_burst=3) as c:
        KeyStore(tmp_path / "keys.db").create("real")
        codes = [c.get("/videos", headers={"X-API-Key": f"mik_guess{i}_x"}).status_code for i in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        assert int(c.get("/videos", headers={"X-API-Key": "mik_more_x"}).headers["retry-after"]) >= 1
        assert c.get("/health").status_code == 200


def test_media_root_inside_the_upload_folder_is_still_media_only(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    """Uploads lie in the index folder by default: they are served, the rest of the folder is not."""
    with make_client(sample, tmp_path, media_roots=[MEDIA]) as c:
        state = c.app.state.api
        folder = state.upload_dir / "feedface0001"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "up.wav").write_bytes(media("audio/LJ002-0020.wav").read_bytes())
        (folder / ".up.wav").write_bytes(b"RIFF")
        rel = f"{folder.name}/up.wav"
        assert c.get(f"/files/{rel}", headers={"Range": "bytes=0-3"}).content == b"RIFF"
        assert_error(c.get(f"/files/{folder.name}/.up.wav"), 404)
