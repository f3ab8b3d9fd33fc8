"""Shared fixtures for the API and web tests (this module holds no tests).

One sample index per test session, built from real media on the session's Ray; test modules
import the fixtures from here, and the index is memoised on the pytest config so that it is
built once even when several modules use it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mediaindex.config import ApiSettings, Settings
from tests.conftest import MEDIA, make_settings, media

SAMPLES = ["audio/jfk.flac", "video/auto-editor_example.mp4"]
_MEMO = pytest.StashKey[dict]()


@dataclass
class Sample:
    settings: Settings
    index: Any  # MediaIndex
    embedder: Any
    pipeline: Any  # the session's Pipeline, for the apps' ingest jobs

    def video_id(self, name: str) -> str:
        return next(r.video_id for r in self.index.catalog.all() if Path(r.source).name == name)

    def app_settings(self, tmp: Path, **api: Any) -> Settings:
        """The sample index's settings with their own keys database (keys must not leak between tests)."""
        base = {"media_roots": [MEDIA], "rate_limit_per_minute": 0, "keys_db": tmp / "keys.db"}
        return self.settings.model_copy(update={"api": ApiSettings(**{**base, **api})})


@pytest.fixture(scope="session")
def sample(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path,
           pipeline, embedder) -> Sample:
    memo = request.config.stash.setdefault(_MEMO, {})
    if "sample" not in memo:
        from mediaindex.index.index import open_index
        from mediaindex.service import IngestRequest, ingest

        # The session's pipeline: stages touch no index, so one pipeline serves every test index.
        settings = make_settings(tmp_path_factory.mktemp("api-index"), cache_dir)
        # Served from request threads: one catalog connection per thread, as `serve` opens it.
        index = open_index(settings, embedder.dim, embedder.name, thread_safe=True)
        report = ingest(IngestRequest(settings, [media(s) for s in SAMPLES]), index, pipeline)
        assert len(report.indexed) == len(SAMPLES), [(o.path, o.reason) for o in report.outcomes]
        memo["sample"] = Sample(settings, index, embedder, pipeline)
    return memo["sample"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server on loopback, in a thread of the test process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def live_server_factory() -> Iterator:
    servers: list[LiveServer] = []

    def start(app: Any) -> LiveServer:
        server = LiveServer(app).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()
