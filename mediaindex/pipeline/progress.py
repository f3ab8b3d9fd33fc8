"""Running counts of an ingest job: files and media hours done, per-stage speed, an ETA."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        if self.finished == 0 or self.finished >= self.total:
            return None
        return self.elapsed / self.finished * (self.total - self.finished)

    def speeds(self) -> list[str]:
        """Each stage whose speed is worth showing, as "speech 6.0x" (media seconds per second of its pool)."""
        elapsed = self.elapsed
        return [f"{s.name} {speed:.1f}x" for s in self.stages if (speed := s.speed_worth_showing(elapsed)) is not None]

    def line(self) -> str:
        """One plain line for logs and non-terminal output."""
        eta = f", ETA {_dur(self.eta)}" if self.eta is not None else ""
        speeds = ", ".join(self.speeds())
        return (f"job {self.job_id}: {self.finished}/{self.total} files ({self.failed} failed), "
                f"{self.media / 3600:.2f} media h in {_dur(self.elapsed)}{eta}" + (f"; {speeds}" if speeds else ""))


def _dur(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"
