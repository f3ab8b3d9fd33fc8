"""Running counts of an ingest job: files and media time done, per-stage speed, the files in the stages now and
how far each stage has got with them, an ETA."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mediaindex.pipeline.discover import shown

# A stage's speed is shown once it has been busy long enough for its real-time factor to say something:
# a stage that had almost nothing to do (the pictures of audio files, the decode of a short clip) would
# show thousands of times real time, a number that says only that the stage did not matter.
MIN_BUSY_SECONDS = 1.0  # of its workers' time in all
MIN_BUSY_SHARE = 0.05  # of the job's wall time, per worker of its pool


@dataclass
class StageStats:
    name: str
    workers: int
    files: int = 0
    busy: float = 0.0  # actor-seconds spent on files that finished
    media: float = 0.0  # media seconds of those files

    @property
    def speed(self) -> float | None:
        """Media seconds per wall second of the whole pool (x real time)."""
        return self.media / self.busy * self.workers if self.busy > 0 else None

    def speed_worth_showing(self, elapsed: float) -> float | None:
        """`speed`, when the stage has done enough of the job's work for it to matter (see MIN_BUSY_*)."""
        if self.media <= 0 or self.busy < MIN_BUSY_SECONDS or self.busy / max(1, self.workers) < MIN_BUSY_SHARE * elapsed:
            return None
        return self.speed


@dataclass
class IngestStats:
    job_id: str
    total: int
    stages: list[StageStats]
    done: int = 0  # indexed or already indexed
    failed: int = 0
    media: float = 0.0  # media seconds indexed in this run
    started: float = field(default_factory=time.monotonic)
    # The files in the stages now: path -> each stage working on it -> the share of its call done (None: the
    # stage cannot tell). A long file shows its progress before it is finished.
    working: dict[str, dict[str, float | None]] = field(default_factory=dict)
    began: dict[str, dict[str, float]] = field(default_factory=dict)  # when those calls started (time.monotonic)

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def under_way(self) -> float:
        """The files in the stages counted by how far they are in time: each stage that tells its share and
        has run t seconds has t·(1 − share)/share left; a file's slowest stage says when it will be done (its
        branches run side by side, and one that started later at 2 % is not behind one at 11 %)."""
        now, count = time.monotonic(), 0.0
        for path, stages in self.working.items():
            started = self.began.get(path, {})
            left = [(now - started[stage]) * (1 - share) / share for stage, share in stages.items()
                    if share and stage in started]
            if left:
                spent = now - min(started.values())
                count += spent / (spent + max(left)) if spent + max(left) > 0 else 0.0
        return count

    @property
    def eta(self) -> float | None:
        progress = self.finished + min(self.under_way, self.total - self.finished)
        if progress <= 0 or self.finished >= self.total:
            return None
        return self.elapsed / progress * (self.total - progress)

    def record(self) -> dict[str, object]:
        """What the job records keep of it while it runs (`JobStore.set_progress`), for `jobs` and the API."""
        eta = self.eta
        now = {path: {stage: None if share is None else round(share, 3) for stage, share in stages.items()}
               for path, stages in self.working.items()}
        return {"now": now, "eta": round(eta, 1) if eta is not None else None, "finished": self.finished,
                "total": self.total, "media_seconds": round(self.media, 1), "updated": time.time()}

    def now(self, most: int = 2) -> str:
        """The files in the stages now, with how far each stage has got: "talk.mp4 speech 43% vision 80%"."""
        parts = [f"{shown(Path(path).name)} {stage_shares(stages)}" for path, stages in list(self.working.items())[:most]]
        more = len(self.working) - most
        return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")

    def speeds(self) -> list[str]:
        """Each stage whose speed is worth showing, as "speech 6.0x" (media seconds per second of its pool)."""
        elapsed = self.elapsed
        return [f"{s.name} {speed:.1f}x" for s in self.stages if (speed := s.speed_worth_showing(elapsed)) is not None]

    def line(self) -> str:
        """One plain line for logs and non-terminal output."""
        eta = f", ETA {clock(self.eta)}" if self.eta is not None else ""
        speeds = ", ".join(self.speeds())
        now = self.now()
        return (f"job {self.job_id}: {self.finished}/{self.total} files ({self.failed} failed), "
                f"{media_time(self.media)} in {clock(self.elapsed)}{eta}" + (f"; {speeds}" if speeds else "")
                + (f"; now {now}" if now else ""))


def stage_shares(stages: dict[str, float | None]) -> str:
    """The stages working on a file with the share each has done: "decode speech 43% vision 80%"."""
    return " ".join(stage if share is None else f"{stage} {share:.0%}" for stage, share in stages.items())


def media_time(seconds: float) -> str:
    """How much media, as a clock ("0:00:11 of media"): a short file reads as plainly as a long one."""
    return f"{clock(seconds)} of media"


def clock(seconds: float) -> str:
    """Seconds as h:mm:ss."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"
