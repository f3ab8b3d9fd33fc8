"""`mediaindex serve` and `mediaindex keys ...`, run as a user runs them: separate processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import MEDIA, REPO, cli_environment, wait_until_ready
from tests.test_api_support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.beside]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("serve-index"), cache_dir, tmp_path_factory.mktemp("tmp"))


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


@pytest.fixture(scope="module")
def server(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port),
                             "--media-root", str(MEDIA / "audio")], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_serve_with_keys_created_and_revoked_from_the_cli(server: str, env: dict[str, str]) -> None:
    assert httpx.get(f"{server}/videos").json() == []  # no keys yet
    assert "no keys" in cli("keys", "list", env=env).stdout
    created = cli("keys", "create", "ci robot", env=env)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    key_id = secret.split("_")[1]
    assert secret.startswith("mik_") and "shown only now" in created.stderr
    listed = cli("keys", "list", env=env).stdout
    assert key_id in listed and "ci robot" in listed and "active" in listed and secret not in listed

    r = httpx.get(f"{server}/videos")
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert httpx.get(f"{server}/health").status_code == 200
    assert httpx.get(f"{server}/videos", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    r = httpx.get(f"{server}/files/jfk.flac", headers={"X-API-Key": secret, "Range": "bytes=0-3"})
    assert r.status_code == 206 and r.content == b"fLaC"
    r = httpx.get(f"{server}/files/%2e%2e/video/manifesto.mp4", headers={"X-API-Key": secret})
    assert r.status_code == 403

    assert cli("keys", "revoke", key_id, env=env).returncode == 0
    assert "revoked" in cli("keys", "list", env=env).stdout
    assert httpx.get(f"{server}/videos", headers={"X-API-Key": secret}).status_code == 401
    again = cli("keys", "revoke", key_id, env=env)
    assert again.returncode != 0 and "no active key" in again.stderr


def test_serve_on_a_port_in_use_says_so_before_it_opens_anything(server: str, env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    port = server.rsplit(":", 1)[1]
    result = cli("serve", "--port", port, "--index", str(tmp_path / "index"), env=env)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "Traceback" not in said, said
    assert said == f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another server is there: " \
                   "pick another --port)"
    assert not (tmp_path / "index" / "schema.json").exists()  # the index was not opened (nor made)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["keys", "create", "  "], "needs a name"), (["serve", "--media-root", "/nonexistent-root"], "not a folder")],
)
def test_bad_serve_and_keys_arguments(env: dict[str, str], args: list[str], message: str) -> None:
    result = cli(*args, env=env)
    assert result.returncode != 0
    assert message in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr
