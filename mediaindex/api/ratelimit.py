"""Per-key token buckets: `per_minute` requests on average, bursts up to `burst`."""

from __future__ import annotations

import math
import threading
import time


class RateLimiter:
    def __init__(self, per_minute: int, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # identity -> (tokens, last refill time)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, identity: str) -> float:
        """0 when the request may go on, else the seconds to wait before retrying."""
        if not self.enabled:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(identity, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[identity] = (tokens - 1.0, now)
                return 0.0
            self._buckets[identity] = (tokens, now)
            if len(self._buckets) > 10_000:
                self._forget_full(now)
            return (1.0 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled: they hold nothing a new bucket would not."""
        self._buckets = {k: (t, last) for k, (t, last) in self._buckets.items()
                         if t + (now - last) * self.rate < self.burst}

    @staticmethod
    def retry_after(wait: float) -> str:
        return str(max(1, math.ceil(wait)))
