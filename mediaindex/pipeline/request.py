"""What an ingest is asked to do, and what it tells its caller while it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediaindex.config import Settings
from mediaindex.jobs import JobStore
from mediaindex.pipeline.progress import IngestStats
from mediaindex.pipeline.write import FileOutcome, Status


@dataclass
class IngestRequest:
    """A new job over paths and manifests, or (`resume`) an existing job continued with its own inputs."""

    settings: Settings
    paths: Sequence[str | Path] = ()
    manifests: Sequence[Path] = ()
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    resume: str | None = None
    # (path, metadata) entries already read: the files a manifest's web addresses were downloaded to, with its rows'
    given: Sequence[tuple[str, dict[str, Any]]] = ()
    jobs: JobStore | None = None  # None: the job store beside the index, opened and closed by the run
    # False: a run that completes leaves the job "running" and its caller records the end with its own result
    # (the API's job runner), so nobody sees the job done before its result is there.
    finish_job: bool = True


@dataclass
class IngestHooks:
    on_job: Callable[[str], None] = lambda job_id: None  # the job exists (new, or the one resumed)
    on_plan: Callable[[int], None] = lambda files: None  # how many files will go through the stages
    on_file: Callable[[FileOutcome], None] = lambda outcome: None  # a file is done with, whatever became of it
    on_tick: Callable[[IngestStats], None] = lambda stats: None  # about once a second, and at the end
    on_dispatch: Callable[[str, str], None] = lambda stage, path: None  # (stage, path): a stage got the file
    # Asked at every file boundary; True stops the run: files in flight go back to pending, finished ones stay.
    cancelled: Callable[[], bool] = lambda: False


@dataclass
class IngestReport:
    job_id: str = ""
    outcomes: list[FileOutcome] = field(default_factory=list)
    cancelled: bool = False  # the run stopped on a cancel request; the job's open files wait for a resume
    left_out: int = 0  # media files the job's include/exclude globs left out of the folders it walked

    def by_status(self, status: str) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def indexed(self) -> list[FileOutcome]:
        return self.by_status(Status.INDEXED)

    @property
    def failed(self) -> list[FileOutcome]:
        return self.by_status(Status.FAILED) + self.by_status(Status.SKIPPED)
