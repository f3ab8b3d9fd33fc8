import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mediaindex.config import load_settings
from mediaindex.jobs import JobFinished, JobNotFound, JobStore, JobStoreError, jobs_db_path, request_key
from tests.conftest import REPO


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


def test_not_a_database_is_refused_with_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(JobStoreError, match=r"job records .*jobs\.db cannot be read .*index itself is not affected"):
        JobStore(bad)
    good = tmp_path / "good" / "jobs.db"
    store = JobStore(good)
    store.create("ingest", {}, files=[(f"/a{i}.wav", {}) for i in range(200)])
    store.close()
    data = bytearray(good.read_bytes())
    data[len(data) // 2:] = b"\xff" * (len(data) - len(data) // 2)  # a garbled second half
    good.write_bytes(bytes(data))
    with pytest.raises(JobStoreError, match="cannot be read"):
        JobStore(good)


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


def _in_another_process(tmp_path: Path, body: str) -> None:
    """Run `body` with `store` (the job records at tmp_path) and `job` (a two-file ingest job) in a process of
    its own, which then ends the way the body makes it end."""
    script = textwrap.dedent(f"""
        import faulthandler, os, signal
        from pathlib import Path
        from mediaindex.jobs import JobStore, crash_record, this_runner
        store = JobStore(Path({str(tmp_path / "jobs.db")!r}))
        job = store.get(store.list()[0].id)
    """) + textwrap.dedent(body)
    subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120)


def _two_file_job(tmp_path: Path) -> str:
    store = JobStore(tmp_path / "jobs.db")
    job = store.create("ingest", {}, files=[("/a.wav", {}), ("/b.wav", {})])
    store.close()
    return job.id


def test_a_killed_run_is_shown_interrupted_and_charges_no_file(tmp_path: Path) -> None:
    job_id = _two_file_job(tmp_path)
    _in_another_process(tmp_path, """
        store.set_state(job.id, "running")
        store.set_working(job.id, "/a.wav", 1)  # a stage works on a.wav
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    store = JobStore(tmp_path / "jobs.db")
    job = store.get(job_id)
    assert job.state == "running" and job.interrupted and job.shown_state == "interrupted"
    assert [(f.state, f.attempts) for f in store.files(job_id)] == [("running", 0), ("pending", 0)]
    assert store.claim(job_id)  # the next run takes it over: the kill is settled, nothing charged
    assert [(f.state, f.attempts, f.reason) for f in store.files(job_id)] == [
        ("pending", 0, "interrupted"), ("pending", 0, "")]
    assert not store.get(job_id).interrupted


def test_a_run_that_crashed_on_a_file_charges_that_file_one_attempt(tmp_path: Path) -> None:
    job_id = _two_file_job(tmp_path)
    _in_another_process(tmp_path, """
        store.set_state(job.id, "running")
        record = open(crash_record(store.path, this_runner()), "w")
        faulthandler.enable(record)
        store.set_working(job.id, "/b.wav", 1)
        faulthandler._sigsegv()  # what a decoder's segfault does to the process
    """)
    store = JobStore(tmp_path / "jobs.db")
    assert store.get(job_id).interrupted
    assert store.interrupted_work(job_id)
    assert [(f.state, f.attempts) for f in store.files(job_id)] == [("pending", 0), ("pending", 1)]
    assert not list(tmp_path.glob(".crash-*"))


def test_a_live_or_finished_run_is_not_interrupted(tmp_path: Path) -> None:
    job_id = _two_file_job(tmp_path)
    store = JobStore(tmp_path / "jobs.db")
    store.set_state(job_id, "running")
    assert not store.get(job_id).interrupted  # this process runs it
    _in_another_process(tmp_path, """
        store.set_state(job.id, "done")
    """)
    assert store.get(job_id).shown_state == "done"


def test_uploads_left_by_a_server_that_stopped_mid_upload_are_deleted_at_the_next_start(tmp_path: Path) -> None:
    from mediaindex.api.uploads import sweep_uploads

    uploads = tmp_path / "uploads"
    before, arriving = uploads / "0123456789ab", uploads / "ba9876543210"
    for folder in (before, arriving):
        folder.mkdir(parents=True)
        (folder / "partial.mp4").write_bytes(b"\0" * 1000)
    started = time.time() - 30  # this server started half a minute ago
    os.utime(before, (started - 60, started - 60))  # made by the server that was killed
    removed = sweep_uploads(uploads, [], retention_s=86400, started=started)
    assert removed == [before] and not before.exists() and (arriving / "partial.mp4").exists()


def test_cli_names_a_garbled_jobs_database_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "jobs.db").write_bytes(b"\x00garbled" * 512)
    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-m", "mediaindex", "jobs"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    said = " ".join(shown.stderr.split())  # the terminal width wraps it
    assert "jobs.db cannot be read" in said and "move it aside" in said


def test_cli_cancels_a_running_summary_and_says_when_it_stops(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    running = store.create("summarize", {"video": "v1"})
    assert store.claim(running.id)
    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "mediaindex", "jobs", "cancel", running.id], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert " ".join(done.stdout.split()) == f"job {running.id} (summarize) will stop before its next language-model call"
    assert store.is_cancel_requested(running.id) and store.get(running.id).state == "running"
    # A question's record shows what was asked and, once answered, the answer.
    asked = store.create("ask", {"question": "Who spoke first?", "video": None})
    store.set_state(asked.id, "done", result={"output": {}, "markdown": "**Answer**\n\nKennedy spoke first."})
    store.close()
    shown = subprocess.run([sys.executable, "-m", "mediaindex", "jobs", asked.id], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [f"job {asked.id} (ask): done", "question: Who spoke first?"]
    assert "Kennedy spoke first." in shown.stdout and "video" not in shown.stdout and "┃" not in shown.stdout
    listed = subprocess.run([sys.executable, "-m", "mediaindex", "jobs"], cwd=REPO, env={**env, "COLUMNS": "120"},
                            capture_output=True, text=True, timeout=120)
    row = next(line for line in listed.stdout.splitlines() if asked.id in line)
    assert "│ ask " in row and "Who spoke first?" in row  # what it asked, where an ingest counts its files


def test_cli_shows_a_job_by_its_id_or_show_and_its_id_and_names_the_forms_it_takes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mediaindex.cli.app import app as cli_app

    store = JobStore(tmp_path / "jobs.db")
    asked = store.create("ask", {"question": "Who spoke first?", "video": None})
    store.close()
    runner = CliRunner()

    def jobs(*args: str):
        return runner.invoke(cli_app, ["jobs", *args, "--index", str(tmp_path)])

    by_id, shown = jobs(asked.id), jobs("show", asked.id)
    assert by_id.exit_code == shown.exit_code == 0 and shown.stdout == by_id.stdout
    assert shown.stdout.splitlines()[:2] == [f"job {asked.id} (ask): pending", "question: Who spoke first?"]
    for args, said in ((("show",), "to show a job: mediaindex jobs show ID"),
                       (("look", asked.id), "jobs takes one job id (mediaindex jobs ID), or cancel and an id"),
                       (("cancel",), "to cancel a job: mediaindex jobs cancel ID"),
                       (("show", "0" * 12), "no job with id '000000000000'")):
        refused = jobs(*args)
        assert refused.exit_code == 2 and said in " ".join(refused.stderr.split()), (args, refused.stderr)


def test_the_api_shows_a_killed_run_as_interrupted(tmp_path: Path) -> None:
    from mediaindex.api.routes.jobs import job_out
    from mediaindex.api.state import ApiState

    job_id = _two_file_job(tmp_path)
    _in_another_process(tmp_path, """
        store.set_state(job.id, "running")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    state = ApiState(load_settings("cpu", index_dir=tmp_path, cache_dir=tmp_path / "cache"))
    try:
        assert job_out(state, state.jobs.get(job_id)).state == "interrupted"  # not "running" forever
    finally:
        state.close()


def test_a_running_ingest_reports_how_far_it_is_to_jobs_and_the_api(tmp_path: Path) -> None:
    from mediaindex.api.routes.jobs import job_out
    from mediaindex.api.state import ApiState

    store = JobStore(tmp_path / "jobs.db")
    job = store.create("ingest", {"paths": ["m"]}, files=[("/m/a talk.mp4", {}), ("/m/b.mp4", {})])
    report = {"now": {"/m/a talk.mp4": {"decode": None, "speech": 0.25}}, "eta": 90.0, "finished": 0, "total": 2,
              "media_seconds": 0.0, "updated": time.time()}
    store.set_progress(job.id, report)
    assert store.get(job.id).progress is None  # a pending job has no run to report
    store.set_state(job.id, "running")
    store.set_file(job.id, "/m/a talk.mp4", "running")
    store.set_progress(job.id, report)
    assert store.get(job.id).progress == report

    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(tmp_path), "COLUMNS": "120"}
    shown = subprocess.run([sys.executable, "-m", "mediaindex", "jobs", job.id], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert f"job {job.id} (ingest): running, ETA 0:01:30" in shown.stdout
    assert "decode speech 25%" in shown.stdout  # the file in the stages, in its reason column
    listed = subprocess.run([sys.executable, "-m", "mediaindex", "jobs"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "running, ETA 0:01:30" in listed.stdout, listed.stdout + listed.stderr
    state = ApiState(load_settings("cpu", index_dir=tmp_path, cache_dir=tmp_path / "cache"))
    try:
        out = job_out(state, state.jobs.get(job.id))
        assert out.progress is not None and out.progress.eta == 90.0
        assert list(out.progress.now.values()) == [{"decode": None, "speech": 0.25}]
        with sqlite3.connect(tmp_path / "jobs.db") as db:  # a report cut short on disk: no progress, no error
            db.execute("UPDATE jobs SET progress = ? WHERE id = ?", ('{"now": {"/m/a talk.mp4": 0.2', job.id))
        assert job_out(state, state.jobs.get(job.id)).progress is None
    finally:
        state.close()
    store.set_state(job.id, "done", result={"indexed": 2})
    store.set_progress(job.id, report)  # a late report of a run that ended changes nothing
    assert store.get(job.id).progress is None
