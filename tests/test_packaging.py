"""The package on its own: a wheel built from the checkout, installed outside the repository, has its
profiles and its page; the code's defaults are the CPU profile's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mediaindex.config import PROFILES, Settings, load_settings

REPO = Path(__file__).resolve().parents[1]


def _differences(code: dict, profile: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(code) | set(profile)):
        a, b = code.get(key), profile.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: code {a!r}, cpu.yaml {b!r}")
    return out


def test_code_defaults_are_the_cpu_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("MEDIAINDEX_")]:
        monkeypatch.delenv(name)
    assert _differences(Settings().model_dump(), load_settings("cpu").model_dump()) == []


def test_profiles_ship_inside_the_package() -> None:
    assert PROFILES.parent == Path(__file__).resolve().parents[1] / "mediaindex"
    assert {p.stem for p in PROFILES.glob("*.yaml")} >= {"cpu", "gpu"}


@pytest.mark.slow
@pytest.mark.beside
def test_wheel_installed_outside_the_repository_loads_both_profiles_and_serves_the_page(
        tmp_path: Path, cache_dir: Path) -> None:
    wheels, target, work = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    work.mkdir()
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("mediaindex-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # The installed copy, not the checkout: its own directory comes first and the repository is not on the path.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAINDEX_")}
    env.update(PYTHONPATH=str(target), MEDIAINDEX_CACHE_DIR=str(cache_dir),
               MEDIAINDEX_INDEX_DIR=str(tmp_path / "index"), MEDIAINDEX_TEMP_DIR=str(tmp_path / "tmp"))
    probe = ("import mediaindex, mediaindex.config as c; print(mediaindex.__file__); "
             "cpu, gpu = c.load_settings('cpu'), c.load_settings('gpu'); "
             "print(cpu.profile, cpu.speech.device, gpu.profile, gpu.speech.device); "
             "import mediaindex.search.relevance as r, mediaindex.search.ranking as k; "
             "print(len(r.load_model().names), bool(k.BACKGROUND_FILE.read_text(encoding='utf-8')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split("\n")
    assert out[0].startswith(str(target))
    assert out[1] == "cpu cpu gpu cuda"
    assert out[2] == "8 True"  # the fitted relevance model and its background passages ship with the package

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port)], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        page = _wait_for(f"http://127.0.0.1:{port}/", server)
        assert "<html" in page.text.lower() and page.headers["content-type"].startswith("text/html")
        scripts = [s for s in ("app.js", "style.css") if s in page.text]
        assert scripts, "the page names its script and style"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen) -> httpx.Response:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            response = httpx.get(url, timeout=5)
            if response.status_code == 200:
                return response
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"no answer from {url}")
