"""Uploaded files: one folder per upload; an upload that was not indexed is not kept forever.

An upload that was indexed stays (it is the media `/media/{id}` serves). One whose job failed or was
cancelled, or ended without indexing it (a copy of a file indexed already), is deleted once
`api.failed_upload_retention_s` has passed since the job ended, so a client can still look at it or retry
meanwhile. A folder no job refers to is an upload that never became a job:
one made before this server started (a server stopped or killed mid-upload) is deleted at once; one made
since is deleted after the same time, and never sooner than an hour (it may be an upload still arriving).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from mediaindex.jobs import Job

log = logging.getLogger("mediaindex.api.uploads")
ENDED_WITHOUT_INDEXING = ("failed", "cancelled")
ORPHAN_MIN_AGE_S = 3600.0
# Uploads arriving in this process make their folders after this moment; older orphans cannot be arriving.
PROCESS_STARTED = time.time()


def upload_folder(upload_dir: Path, job: Job) -> Path | None:
    """The folder of the upload this job ingests, if it is an upload job."""
    name = job.params.get("upload_folder")
    return upload_dir / name if isinstance(name, str) and name and "/" not in name and name != ".." else None


def not_indexed(job: Job) -> bool:
    """The job ended and its upload is in no index entry: it failed, was cancelled, or was done without an
    entry (a copy of a file indexed already; a job's result lists the entries it made or moved)."""
    result = job.result if isinstance(job.result, dict) else {}
    return job.state in ENDED_WITHOUT_INDEXING or (job.state == "done" and result.get("video_ids", True) == [])


def sweep_uploads(upload_dir: Path, jobs: list[Job], retention_s: float, now: float | None = None,
                  started: float | None = None) -> list[Path]:
    """Delete the uploads of jobs that ended without indexing past the retention, and orphans that are stale
    or older than this process (`started`)."""
    now = time.time() if now is None else now
    started = PROCESS_STARTED if started is None else started
    if not upload_dir.is_dir():
        return []
    owners = {folder.name: job for job in jobs if (folder := upload_folder(upload_dir, job)) is not None}
    removed: list[Path] = []
    for folder in upload_dir.iterdir():
        if not folder.is_dir() or folder.is_symlink():
            continue
        job = owners.get(folder.name)
        if job is None:
            made = folder.stat().st_mtime
            expired = made < started or now - made >= max(retention_s, ORPHAN_MIN_AGE_S)
        else:
            expired = not_indexed(job) and now - job.updated >= retention_s
        if expired:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.info("deleted %d upload(s) that were not indexed", len(removed))
    return removed
