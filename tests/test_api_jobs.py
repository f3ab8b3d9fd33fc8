"""Jobs over HTTP (ingest by path and by upload, summarize), API keys and rate limits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.api.keys import KeyStore
from mediaindex.config import ApiSettings
from tests.conftest import MEDIA, make_settings, media
from tests.test_api import assert_error, make_client
from tests.test_api_support import Sample, sample  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def wait_for_job(client: TestClient, job_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {job}")


@pytest.fixture
def fresh(sample: Sample, tmp_path: Path, cache_dir: Path) -> Iterator[TestClient]:  # noqa: F811
    """An app over a new, empty index (the session's Ray pipeline does the work)."""
    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(
        media_roots=[MEDIA], rate_limit_per_minute=0, max_upload_bytes=2 * 1024**2)})
    app = create_app(settings, embedder=sample.embedder, pipeline=sample.pipeline)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_ingest_job_by_path_then_search_and_metrics(fresh: TestClient) -> None:
    r = fresh.post("/ingest", json={"paths": ["audio/english.wav", "audio/LJ002-0035.wav"]})
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/jobs/{job['id']}" and job["kind"] == "ingest"
    assert [Path(f["path"]).name for f in job["files"]] == ["english.wav", "LJ002-0035.wav"]
    done = wait_for_job(fresh, job["id"])
    assert done["state"] == "done", done
    assert done["result"]["indexed"] == 2 and len(done["result"]["video_ids"]) == 2
    assert {f["state"] for f in done["files"]} == {"done"}
    hits = fresh.get("/search", params={"q": "one two three", "limit": 1}).json()["hits"]
    assert Path(hits[0]["source"]).name == "english.wav"
    assert [j["id"] for j in fresh.get("/jobs", params={"kind": "ingest"}).json()] == [job["id"]]
    text = fresh.get("/metrics").text
    assert 'mediaindex_ingest_files_total{status="indexed"} 2.0' in text
    assert 'mediaindex_jobs{kind="ingest",state="done"} 1.0' in text
    assert "mediaindex_ingest_media_seconds_total" in text

    again = wait_for_job(fresh, fresh.post("/ingest", json={"paths": ["audio/english.wav"]}).json()["id"])
    assert again["state"] == "done" and again["result"]["unchanged"] == 1


def test_ingest_job_of_a_folder_with_a_bad_file(tmp_path: Path, cache_dir: Path, sample: Sample) -> None:  # noqa: F811
    root = tmp_path / "root"
    root.mkdir()
    (root / "junk.mp4").write_text("not a video")
    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(media_roots=[root])})
    with TestClient(create_app(settings, embedder=sample.embedder, pipeline=sample.pipeline)) as c:
        assert_error(c.post("/ingest", json={"paths": ["missing-folder"]}), 404)
        job = wait_for_job(c, c.post("/ingest", json={"paths": ["."]}).json()["id"])
    assert job["state"] == "failed" and "nothing could be indexed" in job["error"]
    assert job["files"][0]["state"] == "failed" and "not a readable media file" in job["files"][0]["reason"]


def test_upload_is_ingested(fresh: TestClient) -> None:
    data = media("audio/LJ002-0020.wav").read_bytes()
    r = fresh.post("/ingest/upload", params={"filename": "../../In 1813.wav"}, content=data,
                   headers={"content-type": "application/octet-stream"})
    assert r.status_code == 202, r.text
    job = wait_for_job(fresh, r.json()["id"])
    assert job["state"] == "done", job
    upload_dir = fresh.app.state.api.upload_dir.resolve()
    stored = next(upload_dir.rglob("*.wav"))
    assert stored.name == "In 1813.wav" and stored.read_bytes() == data
    video = job["result"]["video_ids"][0]
    assert fresh.get(f"/media/{video}", headers={"Range": "bytes=0-3"}).content == b"RIFF"
    # Answers show the upload by its name, never the index folder that keeps it.
    assert job["files"][0]["path"] == "In 1813.wav"
    hits = fresh.post("/search", json={"q": "In 1813", "filters": {"video_id": video}}).json()["hits"]
    assert hits and {h["source"] for h in hits} == {"In 1813.wav"}
    for answer in (fresh.get("/jobs"), fresh.get(f"/jobs/{job['id']}"), fresh.get("/videos"),
                   fresh.get(f"/videos/{video}"), fresh.post("/search", json={"q": "1813"})):
        assert answer.status_code == 200 and str(upload_dir) not in answer.text, answer.text
        assert str(fresh.app.state.api.settings.index_dir) not in answer.text, answer.text


@pytest.mark.parametrize(
    ("filename", "body", "status", "words"),
    [("clip.txt", b"abc", 415, "media file"), ("..", b"abc", 415, "media file"), ("clip.wav", b"", 400, "empty"),
     ("big.wav", b"0" * (3 * 1024**2), 413, "limit")],
)
def test_bad_uploads_are_refused_and_leave_nothing(fresh: TestClient, filename: str, body: bytes, status: int,
                                                   words: str) -> None:
    r = fresh.post("/ingest/upload", params={"filename": filename}, content=body)
    assert_error(r, status, words)
    assert not any(p.is_file() for p in fresh.app.state.api.upload_dir.rglob("*"))


def test_oversized_chunked_upload_is_cut_off(fresh: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
        for _ in range(40):
            yield b"0" * 100_000

    assert_error(fresh.post("/ingest/upload", params={"filename": "big.wav"}, content=chunks()), 413, "limit")
    assert not any(p.is_file() for p in fresh.app.state.api.upload_dir.rglob("*"))


def test_summaries_switch_reaches_the_ingest_run(fresh: TestClient, monkeypatch) -> None:
    """The request's `summaries` is the job's ingest.summaries, as `ingest --summaries/--no-summaries` sets it."""
    import mediaindex.service as ingest_module
    from mediaindex.pipeline.run import IngestReport
    from mediaindex.pipeline.spec import default_stages

    runs: list[tuple[bool, list[str]]] = []  # (ingest.summaries, the stages of the pipeline) per run
    started: list[bool] = []  # ingest.summaries of every pipeline the server started

    def fake_ingest(request, index, pipeline=None, hooks=None) -> IngestReport:
        runs.append((request.settings.ingest.summaries, [s.name for s in pipeline.stages]))
        return IngestReport(job_id=request.resume)

    class FakePipeline:  # the real one would load every model, the language model too
        def __init__(self, settings) -> None:
            started.append(settings.ingest.summaries)
            self.stages = default_stages(settings)

        def close(self) -> None:
            pass

    monkeypatch.setattr(ingest_module, "ingest", fake_ingest)
    monkeypatch.setattr(ingest_module, "Pipeline", FakePipeline)
    assert fresh.app.state.api.settings.ingest.summaries is False  # the server's default

    def job(**summaries) -> dict:
        r = fresh.post("/ingest", json={"paths": ["audio/jfk.flac"], **summaries})
        assert r.status_code == 202, r.text
        return wait_for_job(fresh, r.json()["id"])

    assert job(summaries=True)["params"]["summaries"] is True
    assert runs[-1][0] is True and "summary" in runs[-1][1]
    assert started == [True]  # the session's pipeline has no summary stage: one with it was started
    # Jobs without summaries pass its summary stage by (the ingest's route); no other pipeline starts.
    assert job(summaries=False)["params"]["summaries"] is False and runs[-1][0] is False
    assert job()["params"]["summaries"] is None and runs[-1][0] is False
    assert job(summaries=None)["params"]["summaries"] is None and runs[-1][0] is False
    assert started == [True]

    r = fresh.post("/ingest/upload", params={"filename": "jfk.flac", "summaries": "true"},
                   content=media("audio/jfk.flac").read_bytes())
    assert r.status_code == 202, r.text
    assert wait_for_job(fresh, r.json()["id"])["params"]["summaries"] is True and runs[-1][0] is True
    assert len(runs) == 5 and started == [True]


def test_summarize_refuses_unknown_videos(fresh: TestClient) -> None:
    assert_error(fresh.post("/summarize", json={"video_id": "0000000000000000"}), 404, "no video")
    assert_error(fresh.post("/summarize", json={}), 422, "video_id")


def test_unknown_job_is_404(fresh: TestClient) -> None:
    assert_error(fresh.get("/jobs/000000000000"), 404, "no job")
    assert_error(fresh.get("/jobs/bad%20id"), 422)


# ---- keys and limits -----------------------------------------------------------------------------

@pytest.fixture
def keyed(sample: Sample, tmp_path: Path) -> Iterator[tuple[TestClient, KeyStore]]:  # noqa: F811
    keys = KeyStore(tmp_path / "keys.db")
    with make_client(sample, tmp_path) as c:
        yield c, keys


PROTECTED = ["/search?q=country", "/videos", "/metrics", "/jobs", "/files/audio/jfk.flac", "/jobs/abc"]


def test_keys_are_required_once_configured(keyed, tmp_path: Path) -> None:
    client, keys = keyed
    assert client.get("/videos").status_code == 200  # no key configured yet: open
    key, secret = keys.create("tester")
    for path in PROTECTED:
        r = client.get(path)
        assert_error(r, 401, "API key is required")
        assert r.headers["www-authenticate"] == "Bearer"
    assert_error(client.post("/ingest", json={"paths": ["audio/jfk.flac"]}), 401)
    assert client.get("/health").status_code == 200 and client.get("/health/ready").status_code == 200
    assert client.get("/").status_code == 200  # the page itself holds no data
    for bad in ("nope", "mik_x_y", f"mik_{key.id}_wrong", secret + "x"):
        assert_error(client.get("/videos", headers={"X-API-Key": bad}), 401, "not valid")
    assert client.get("/videos", headers={"X-API-Key": secret}).status_code == 200
    assert client.get("/videos", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    client.cookies.set("mediaindex_key", secret)
    assert client.get("/videos").status_code == 200
    client.cookies.clear()
    assert secret.split("_", 2)[2].encode() not in (tmp_path / "keys.db").read_bytes()  # only a hash at rest
    assert keys.revoke(key.id)
    assert_error(client.get("/videos", headers={"X-API-Key": secret}), 401, "revoked")
    assert_error(client.get("/videos"), 401)  # revoking the last key does not open the API


def test_require_keys_without_any_key(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    with make_client(sample, tmp_path, require_keys=True) as c:
        assert_error(c.get("/videos"), 401)
        assert c.get("/health").status_code == 200


def test_rate_limit_is_per_key(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    with make_client(sample, tmp_path, rate_limit_per_minute=6, rate_limit_burst=3) as c:
        keys = KeyStore(tmp_path / "keys.db")
        _, a = keys.create("a")
        _, b = keys.create("b")
        codes = [c.get("/videos", headers={"X-API-Key": a}).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = c.get("/videos", headers={"X-API-Key": a})
        assert_error(r, 429, "rate limit")
        assert int(r.headers["retry-after"]) >= 1
        assert c.get("/videos", headers={"X-API-Key": b}).status_code == 200
        assert all(c.get("/health").status_code == 200 for _ in range(5))  # health is never limited
