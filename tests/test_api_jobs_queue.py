"""The job queue over HTTP: bounded, identical pending requests joined, cancel, failed uploads swept.

The app runs without its job runner (no lifespan), so jobs stay pending for as long as a test needs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.config import ApiSettings
from mediaindex.jobs import JobStore
from tests.conftest import MEDIA, make_settings, media
from tests.test_api import assert_error

LIMIT = 3


@pytest.fixture
def queued(tmp_path: Path, cache_dir: Path, embedder) -> Iterator[TestClient]:
    from mediaindex.index.index import open_index

    settings = make_settings(tmp_path / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(
        media_roots=[MEDIA], rate_limit_per_minute=0, max_pending_jobs=LIMIT, keys_db=tmp_path / "keys.db",
        failed_upload_retention_s=600)})
    index = open_index(settings, embedder.dim, embedder.name, thread_safe=True)
    try:
        yield TestClient(create_app(settings, index=index, embedder=embedder), raise_server_exceptions=False)
    finally:
        index.close()


def test_identical_pending_requests_join_and_the_queue_is_bounded(queued: TestClient) -> None:
    first = queued.post("/ingest", json={"paths": ["audio/jfk.flac"]})
    assert first.status_code == 202, first.text
    # The same file named another way is the same work: it joins the pending job.
    again = queued.post("/ingest", json={"paths": [str(media("audio/jfk.flac"))]})
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert again.headers["x-joined-job"] == first.json()["id"]
    asked = [queued.post("/ask", json={"question": q}) for q in ("who spoke?", "who spoke?", "what was said?")]
    assert [r.status_code for r in asked] == [202, 202, 202]
    assert asked[0].json()["id"] == asked[1].json()["id"] != asked[2].json()["id"]
    assert len(queued.get("/jobs").json()) == LIMIT

    full = queued.post("/ingest", json={"paths": ["audio/english.wav"]})
    body = assert_error(full, 429, "already waiting")
    assert int(full.headers["retry-after"]) > 0 and body["error"] == "rate_limited"
    uploads = queued.app.state.api.upload_dir
    kept = set(uploads.iterdir()) if uploads.is_dir() else set()
    upload = queued.post("/ingest/upload", params={"filename": "e.wav"}, content=media("audio/english.wav").read_bytes())
    assert_error(upload, 429, "already waiting")  # refused before its body was read: no copy kept
    assert int(upload.headers["retry-after"]) > 0 and (set(uploads.iterdir()) if uploads.is_dir() else set()) == kept
    assert len(queued.get("/jobs").json()) == LIMIT  # the refused request left no job

    cancelled = queued.delete(f"/jobs/{asked[2].json()['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["cancel_requested"] is True
    # What a page that looks every few seconds asks for: the jobs still to finish, without their file lists.
    active = queued.get("/jobs", params={"active": "true", "files": "false"}).json()
    assert {j["id"] for j in active} == {first.json()["id"], asked[0].json()["id"]}
    ingest = next(j for j in active if j["kind"] == "ingest")
    assert ingest["files"] == [] and ingest["counts"] == {"pending": 1}
    assert len(queued.get("/jobs", params={"kind": "ingest"}).json()[0]["files"]) == 1
    assert_error(queued.get("/jobs", params={"active": "maybe"}), 422, "active")
    room = queued.post("/ingest", json={"paths": ["audio/english.wav"]})
    assert room.status_code == 202  # room again
    assert_error(queued.delete(f"/jobs/{asked[2].json()['id']}"), 409, "already ended")
    assert_error(queued.delete("/jobs/000000000000"), 404, "no job")
    assert queued.delete(f"/jobs/{room.json()['id']}").status_code == 200
    # A request identical to a cancelled one is new work.
    assert queued.post("/ask", json={"question": "what was said?"}).json()["id"] != asked[2].json()["id"]


def test_running_jobs_are_asked_to_stop(queued: TestClient) -> None:
    """A running ingest, question or summary: 202, still running, asked to stop (what each does then is tested
    where it runs: test_jobs_cancel.py, test_agents.py)."""
    state = queued.app.state.api
    ask = queued.post("/ask", json={"question": "anything?"}).json()["id"]
    ingest = queued.post("/ingest", json={"paths": ["audio/jfk.flac", "audio/english.wav"]}).json()["id"]
    with state.jobs_lock:
        state.jobs.claim(ask)
        state.jobs.claim(ingest)
    for job in (ask, ingest):
        r = queued.delete(f"/jobs/{job}")
        assert r.status_code == 202 and r.json()["state"] == "running" and r.json()["cancel_requested"] is True
        with state.jobs_lock:
            assert state.jobs.is_cancel_requested(job)


def test_the_same_upload_twice_is_one_job_and_one_copy(queued: TestClient) -> None:
    data = media("audio/LJ002-0020.wav").read_bytes()
    ids = [queued.post("/ingest/upload", params={"filename": "In 1813.wav"}, content=data).json()["id"]
           for _ in range(2)]
    assert ids[0] == ids[1]
    upload_dir = queued.app.state.api.upload_dir
    assert len([p for p in upload_dir.rglob("*") if p.is_file()]) == 1
    other = queued.post("/ingest/upload", params={"filename": "In 1813.wav"}, content=data[:-100])
    assert other.json()["id"] != ids[0]  # other bytes under the same name: other work


def test_uploads_of_failed_jobs_are_swept_after_the_retention(queued: TestClient) -> None:
    state = queued.app.state.api
    data = media("audio/LJ002-0035.wav").read_bytes()
    failed = queued.post("/ingest/upload", params={"filename": "a.wav"}, content=data).json()
    kept = queued.post("/ingest/upload", params={"filename": "b.wav"}, content=data[:-10]).json()
    fresh_fail = queued.post("/ingest/upload", params={"filename": "c.wav"}, content=data[:-20]).json()
    db = JobStore.of(state.settings)
    # Two more uploads, recorded as the server records them (the queue holds three waiting jobs at most).
    copy, indexed = ({"id": db.create("ingest", {"upload": name, "upload_folder": folder}).id,
                      "params": {"upload_folder": folder}} for name, folder in (("d.wav", "c0py00000001"),
                                                                              ("e.wav", "1ndexed00001")))
    folders = {j["id"]: state.upload_dir / j["params"]["upload_folder"] for j in (failed, kept, fresh_fail, copy, indexed)}
    for name, job in (("d.wav", copy), ("e.wav", indexed)):
        folders[job["id"]].mkdir()
        (folders[job["id"]] / name).write_bytes(data)
    db.set_state(failed["id"], "failed", error="nothing could be indexed")
    db.set_state(kept["id"], "done")
    db.set_state(fresh_fail["id"], "failed", error="nothing could be indexed")
    # Done without an entry: the same content as a file indexed already (the runner's result lists none).
    db.set_state(copy["id"], "done", result={"indexed": 0, "unchanged": 1, "video_ids": []})
    db.set_state(indexed["id"], "done", result={"indexed": 1, "unchanged": 0, "video_ids": ["0123456789abcdef"]})
    long_ago = time.time() - 3600
    db._db.execute("UPDATE jobs SET updated = ? WHERE id IN (?, ?, ?, ?)",
                   (long_ago, failed["id"], kept["id"], copy["id"], indexed["id"]))
    db._db.commit()
    db.close()
    orphan, new_orphan = state.upload_dir / "deadbeef0001", state.upload_dir / "deadbeef0002"
    for folder in (orphan, new_orphan):
        folder.mkdir()
        (folder / "x.wav").write_bytes(b"RIFF")
    os.utime(orphan, (time.time() - 2 * 3600, time.time() - 2 * 3600))  # a server stopped mid-upload, long ago

    state.runner.sweep()
    assert not folders[failed["id"]].exists() and not orphan.exists() and not folders[copy["id"]].exists()
    assert folders[kept["id"]].exists() and folders[indexed["id"]].exists()  # indexed: the media the index serves
    assert folders[fresh_fail["id"]].exists() and new_orphan.exists()  # within the retention


def test_a_question_kept_to_files_with_a_metadata_value(queued: TestClient) -> None:
    """POST /ask's `where` is kept with the job (its run keeps the loop's searches to those files: test_agents.py);
    a question with another scope is another job; a bad scope or question is refused before a job exists."""
    scoped = queued.post("/ask", json={"question": "who spoke?",
                                       "where": {"tags": "politics", "year": 1961, "reviewed": True}})
    assert scoped.status_code == 202 and scoped.json()["params"]["where"] == [["tags", "politics"], ["year", "1961"],
                                                                              ["reviewed", "true"]]
    assert queued.post("/ask", json={"question": "who spoke?"}).json()["id"] != scoped.json()["id"]
    for body, words in (({"question": "who?", "where": {"tags": ["a", "b"]}}, "where"),
                        ({"question": "who?", "where": {"tags": None}}, "where"),
                        ({"question": "who?", "where": {'ta"gs': "x"}}, "without quotes"),
                        ({"question": "   "}, "the question is empty")):
        assert_error(queued.post("/ask", json=body), 422, words)
    assert len(queued.get("/jobs").json()) == 2
