"""Uploaded files: one folder per upload; an upload whose job failed or was cancelled is not kept forever.

An upload that was indexed stays (it is the media `/media/{id}` serves). One whose job failed or was
cancelled is deleted once `api.failed_upload_retention_s` has passed since the job ended, so a client
can still look at it or retry meanwhile; a folder no job refers to (the server stopped mid-upload) is
deleted after the same time, and never sooner than an hour (it may be an upload still arriving).
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


def upload_folder(upload_dir: Path, job: Job) -> Path | None:
    """The folder of the upload this job ingests, if it is an upload job."""
    name = job.params.get("upload_folder")
    return upload_dir / name if isinstance(name, str) and name and "/" not in name and name != ".." else None


def sweep_uploads(upload_dir: Path, jobs: list[Job], retention_s: float, now: float | None = None) -> list[Path]:
    """Delete the uploads of jobs that ended without indexing past the retention, and stale orphans."""
    now = time.time() if now is None else now
    if not upload_dir.is_dir():
        return []
    owners = {folder.name: job for job in jobs if (folder := upload_folder(upload_dir, job)) is not None}
    removed: list[Path] = []
    for folder in upload_dir.iterdir():
        if not folder.is_dir() or folder.is_symlink():
            continue
        job = owners.get(folder.name)
        if job is None:
            expired = now - folder.stat().st_mtime >= max(retention_s, ORPHAN_MIN_AGE_S)
        else:
            expired = job.state in ENDED_WITHOUT_INDEXING and now - job.updated >= retention_s
        if expired:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.info("deleted %d upload(s) that were not indexed", len(removed))
    return removed
