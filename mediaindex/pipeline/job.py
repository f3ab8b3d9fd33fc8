"""An ingest's persisted job: created from the inputs, or checked before it is resumed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mediaindex.config import Settings
from mediaindex.jobs import JobStore
from mediaindex.pipeline.inputs import InputError, Meta, plan_inputs

# A job's parameter saying how many media files of the folders it walked its include/exclude globs left out.
GLOBS_LEFT_OUT = "left_out_by_globs"


def jobs_store(settings: Settings) -> JobStore:
    """The job records of an index live beside it."""
    return JobStore.of(settings)


def with_choices(settings: Settings, summaries: bool | None = None, reindex: bool | None = None) -> Settings:
    """`settings` with ingest.summaries and ingest.reindex set as `ingest --summaries/--no-summaries` and
    `--reindex` set them; None keeps the config's."""
    chosen = {k: v for k, v in (("summaries", summaries), ("reindex", reindex)) if v is not None}
    if all(getattr(settings.ingest, k) == v for k, v in chosen.items()):
        return settings
    return settings.model_copy(update={"ingest": settings.ingest.model_copy(update=chosen)})


def create_job(jobs: JobStore, settings: Settings, paths: Sequence[str | Path] = (), manifests: Sequence[Path] = (),
               include: Sequence[str] = (), exclude: Sequence[str] = (),
               given: Sequence[tuple[str, Meta]] = ()) -> str:
    """Expand the inputs into a persisted manifest (nothing runs yet); returns the job id."""
    plan = plan_inputs(paths, manifests, include, exclude, given)
    params = {
        "paths": [str(p) for p in paths], "manifests": [str(m) for m in manifests],
        "include": list(include), "exclude": list(exclude), "index_dir": str(settings.index_dir),
        "summaries": settings.ingest.summaries, "reindex": settings.ingest.reindex,
        GLOBS_LEFT_OUT: plan.left_out,
    }
    files = plan.files + [(path, {}) for path, _ in plan.skipped]
    job = jobs.create("ingest", params, files=files)
    for path, reason in plan.skipped:
        jobs.set_file(job.id, path, "skipped", reason)
    return job.id


def resumable(jobs: JobStore, job_id: str, settings: Settings) -> Settings:
    """Check that `job_id` can be resumed here; returns the settings it runs with (its summaries and reindex
    included)."""
    job = jobs.get(job_id)
    if job.kind != "ingest":
        raise InputError(f"job {job_id} is a {job.kind} job, not an ingest job")
    if job.params.get("index_dir", str(settings.index_dir)) != str(settings.index_dir):
        raise InputError(f"job {job_id} writes to the index at {job.params.get('index_dir')}; "
                         f"resume it with --index {job.params.get('index_dir')}")
    # The summaries and re-indexing a job was started with are part of its work: a resume finishes them.
    return with_choices(settings, summaries=True if job.params.get("summaries") else None,
                        reindex=True if job.params.get("reindex") else None)
