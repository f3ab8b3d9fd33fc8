import sqlite3
from pathlib import Path

import pytest

from mediaindex.jobs import JobNotFound, JobStore


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
