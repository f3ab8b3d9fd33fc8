"""An ingest's persisted job: created from the inputs, or checked before it is resumed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mediaindex.config import Settings
from mediaindex.jobs import JobStore
from mediaindex.pipeline.inputs import InputError, plan_inputs


def jobs_store(settings: Settings) -> JobStore:
    """The job records of an index live beside it."""
    return JobStore.of(settings)


def with_summaries(settings: Settings, summaries: bool | None) -> Settings:
    """`settings` with ingest.summaries set as `ingest --summaries/--no-summaries` sets it; None keeps the config."""
    if summaries is None or summaries == settings.ingest.summaries:
        return settings
    return settings.model_copy(update={"ingest": settings.ingest.model_copy(update={"summaries": summaries})})


def create_job(jobs: JobStore, settings: Settings, paths: Sequence[str | Path] = (), manifests: Sequence[Path] = (),
               include: Sequence[str] = (), exclude: Sequence[str] = ()) -> str:
    """Expand the inputs into a persisted manifest (nothing runs yet); returns the job id."""
    plan = plan_inputs(paths, manifests, include, exclude)
    params = {
        "paths": [str(p) for p in paths], "manifests": [str(m) for m in manifests],
        "include": list(include), "exclude": list(exclude), "index_dir": str(settings.index_dir),
        "summaries": settings.ingest.summaries,
    }
    files = plan.files + [(path, {}) for path, _ in plan.skipped]
    job = jobs.create("ingest", params, files=files)
    for path, reason in plan.skipped:
        jobs.set_file(job.id, path, "skipped", reason)
    return job.id


def resumable(jobs: JobStore, job_id: str, settings: Settings) -> Settings:
    """Check that `job_id` can be resumed here; returns the settings it runs with (its summaries included)."""
    job = jobs.get(job_id)
    if job.kind != "ingest":
        raise InputError(f"job {job_id} is a {job.kind} job, not an ingest job")
    if job.params.get("index_dir", str(settings.index_dir)) != str(settings.index_dir):
        raise InputError(f"job {job_id} writes to the index at {job.params.get('index_dir')}; "
                         f"resume it with --index {job.params.get('index_dir')}")
    # The summaries a job was started with are part of its work: a resume finishes them.
    return with_summaries(settings, True) if job.params.get("summaries") else settings
