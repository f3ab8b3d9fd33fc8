"""Prometheus metrics: one registry per app, so that several apps (tests) never collide."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily


class _JobCollector:
    """Job counts by kind and state, read from the job records at scrape time."""

    def __init__(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self._counts = counts

    def collect(self):
        family = GaugeMetricFamily("mediaindex_jobs", "Jobs by kind and state", labels=["kind", "state"])
        for (kind, state), n in sorted(self._counts().items()):
            family.add_metric([kind, state], n)
        yield family


class Metrics:
    def __init__(self, job_counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("mediaindex_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("mediaindex_http_request_seconds", "HTTP request latency", ["method", "route"],
                                 registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.searches = Counter("mediaindex_searches", "Searches run", ["kind"], registry=self.registry)
        self.files = Counter("mediaindex_ingest_files", "Files finished by ingest jobs", ["status"],
                             registry=self.registry)
        self.segments = Counter("mediaindex_ingest_segments", "Segments written by ingest jobs",
                                registry=self.registry)
        self.media_seconds = Counter("mediaindex_ingest_media_seconds", "Seconds of media indexed by ingest jobs",
                                     registry=self.registry)
        self.ingest_seconds = Counter("mediaindex_ingest_busy_seconds", "Wall time spent running ingest jobs",
                                      registry=self.registry)
        self.registry.register(_JobCollector(job_counts))

    def render(self) -> bytes:
        return generate_latest(self.registry)
