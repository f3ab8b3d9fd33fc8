import sqlite3
from pathlib import Path

import pytest

from mediaindex.config import load_settings
from mediaindex.jobs import JobFinished, JobNotFound, JobStore, jobs_db_path, request_key


def test_job_lifecycle_survives_reopen(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    job = store.create("ingest", {"paths": ["a"]}, files=[("/m/a.mp4", {"title": "A"}), ("/m/b.mp4", {})])
    assert job.state == "pending" and job.kind == "ingest"
    store.set_state(job.id, "running")
    store.set_file(job.id, "/m/a.mp4", "done", video_id="v1", attempt=True)
    store.close()

    reopened = JobStore(tmp_path / "jobs.db")
    assert reopened.get(job.id).state == "running"
    files = reopened.files(job.id)
    assert [(f.path, f.state, f.attempts, f.video_id) for f in files] == [
        ("/m/a.mp4", "done", 1, "v1"), ("/m/b.mp4", "pending", 0, None)]
    assert files[0].meta == {"title": "A"}
    assert [f.path for f in reopened.files(job.id, states=("pending", "running"))] == ["/m/b.mp4"]
    assert reopened.counts(job.id) == {"done": 1, "pending": 1}
    reopened.set_state(job.id, "done", result={"indexed": 1})
    assert reopened.get(job.id).result == {"indexed": 1}
    assert [j.id for j in reopened.list(kind="ingest")] == [job.id]


def test_bad_ids_and_states_are_refused(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    with pytest.raises(JobNotFound, match="no job with id 'nope'"):
        store.get("nope")
    with pytest.raises(JobNotFound):
        store.set_state("nope", "done")
    job = store.create("ask", {"question": "q"})
    with pytest.raises(ValueError, match="unknown job state"):
        store.set_state(job.id, "exploded")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="has no file"):
        store.set_file(job.id, "/not/in/manifest", "done")


def test_not_a_database_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        JobStore(bad)


def test_cancel_a_pending_job_ends_it_and_a_running_one_is_asked_to_stop(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    waiting = store.create("summarize", {"video": "v1"})
    assert not store.is_cancel_requested(waiting.id)
    cancelled = store.request_cancel(waiting.id)
    assert cancelled.state == "cancelled" and cancelled.cancel_requested is not None
    assert not store.claim(waiting.id)  # a worker that picks it up afterwards must not run it

    running = store.create("ingest", {"paths": ["a"]}, files=[("/m/a.mp4", {}), ("/m/b.mp4", {})])
    assert store.claim(running.id) and store.get(running.id).state == "running"
    store.set_file(running.id, "/m/a.mp4", "done", video_id="v1")
    asked = store.request_cancel(running.id)
    # Still running: it stops at its next file boundary, and the file it finished stays done.
    assert asked.state == "running" and store.is_cancel_requested(running.id)
    assert store.request_cancel(running.id).cancel_requested == asked.cancel_requested  # asking twice is harmless
    assert store.counts(running.id) == {"done": 1, "pending": 1}
    store.set_state(running.id, "cancelled", error="cancelled")
    with pytest.raises(JobFinished, match="already ended"):
        store.request_cancel(running.id)
    with pytest.raises(JobNotFound):
        store.is_cancel_requested("nope")


def test_identical_pending_requests_share_one_job(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    key = request_key("summarize", {"video": "v1", "recompute": False})
    assert key == request_key("summarize", {"recompute": False, "video": "v1"})  # key order does not matter
    assert key != request_key("summarize", {"video": "v2", "recompute": False})
    first = store.create("summarize", {"video": "v1", "recompute": False}, key=key)
    assert store.find_pending(key).id == first.id
    assert store.count_pending() == 1 and store.count_pending({"video": "v1"}) == 1
    assert store.count_pending({"video": "v2"}) == 0
    store.claim(first.id)  # once it runs, a new identical request is new work
    assert store.find_pending(key) is None and store.count_pending() == 0


def test_a_store_from_before_cancelling_gains_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL, "
                      "params TEXT NOT NULL, result TEXT, error TEXT, created REAL NOT NULL, updated REAL NOT NULL);"
                      "INSERT INTO jobs VALUES ('old1', 'ask', 'pending', '{}', NULL, NULL, 1.0, 1.0);")
    old.commit()
    old.close()
    store = JobStore(path)
    assert store.get("old1").cancel_requested is None
    assert store.request_cancel("old1").state == "cancelled"


def test_one_place_names_the_jobs_database(tmp_path: Path) -> None:
    settings = load_settings("cpu", index_dir=tmp_path / "idx")
    assert jobs_db_path(settings) == tmp_path / "idx" / "jobs.db"
    store = JobStore.of(settings)
    store.create("ask", {"question": "q"})
    store.close()
    assert jobs_db_path(settings).exists()
