"""Where a job's stages run: a small job on threads of this process, any other on Ray.

Starting Ray, spawning one actor per stage and loading each model in its own process costs seconds before
the first file moves; for a handful of short files that fixed cost is most of the run. Small is set by
`ingest.in_process_max_files` and `ingest.in_process_max_seconds` (the media duration of the files that go
through the stages, read from their headers); a job with summaries or one sent to a cluster (`ray.address`)
runs on Ray whatever its size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.media.probe import probe
from mediaindex.pipeline.plan import Plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    local: bool  # the stages run on threads of this process
    why: str  # for the log


def has_pictures(plans: Sequence[Plan]) -> bool:
    """Whether some file may have pictures (False: every file was probed and has none)."""
    return _probed(plans)[1]


def _probed(plans: Sequence[Plan]) -> tuple[float, bool]:
    """The files' media duration and whether any has a video stream, from their headers (a file that cannot
    be read counts 0 s and may have pictures: it fails in its first stage)."""
    total, video = 0.0, False
    for plan in plans:
        try:
            info = probe(plan.path)
        except MediaError:
            video = True
            continue
        total += max(0.0, info.duration)
        video = video or info.has_video
    return total, video


def in_process(settings: Settings, plans: Sequence[Plan]) -> Choice:
    """Whether the job's stages run in this process, and why."""
    ing = settings.ingest
    if settings.ray.address:
        return Choice(False, f"ray.address is {settings.ray.address}")
    if ing.summaries:
        return Choice(False, "summaries run on Ray")
    if not ing.in_process_max_files or not ing.in_process_max_seconds:
        return Choice(False, "in-process runs are off (ingest.in_process_max_files or in_process_max_seconds is 0)")
    if len(plans) > ing.in_process_max_files:
        return Choice(False, f"{len(plans)} files > ingest.in_process_max_files {ing.in_process_max_files}")
    seconds, _ = _probed(plans)
    if seconds > ing.in_process_max_seconds:
        return Choice(False, f"{len(plans)} files, {seconds:.0f} s of media > ingest.in_process_max_seconds "
                             f"{ing.in_process_max_seconds:g}")
    return Choice(True, f"{len(plans)} file{'' if len(plans) == 1 else 's'}, {seconds:.0f} s of media")
