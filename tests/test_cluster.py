"""`mediaindex ingest --address` against a real two-node Ray cluster started with the `ray` CLI, and the serving
engine's placement in a Ray with two GPUs.

Both nodes run on this machine, each with its own raylet, object store and 2 logical CPUs, and with
token authentication on (one token for the nodes and the CLI). The stages ask for more CPUs than one
node has, so the job must spread over both. The cluster is stopped by killing exactly the processes it
started: `ray stop` would stop every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, media

pytestmark = [pytest.mark.slow, pytest.mark.beside]

RAY = Path(sys.executable).parent / "ray"
FILES = ["video/testvideo.mp4", "audio/jfk.flac", "video/chaplin.mp4"]
NODE_CPUS = 2
# Per actor: speech and vision (1.5 CPUs each) cannot share a 2-CPU node, so the pipeline (4 CPUs in
# all) fills both nodes.
STAGE_CPUS = {"DECODE": "0.5", "SPEECH": "1.5", "VISION": "1.5", "EMBED": "0.5"}


@dataclass
class RayCluster:
    address: str
    token: str
    temp_dir: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] == "Z" else fields[19]


def _process_tree(roots: list[int]) -> dict[int, str]:
    """Every live process below (and including) the roots, with its start time."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree: dict[int, str] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        started = _start_time(pid)
        if started is not None and pid not in tree:
            tree[pid] = started
            todo.extend(children.get(pid, []))
    return tree


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop our `ray start --block` processes and everything they started, and nothing else.

    Ray's workers run in process groups of their own, so the processes are found by parentage and
    killed by pid (checked against their start time, so a reused pid is never hit).
    """
    tree = _process_tree([p.pid for p in procs])
    for p in procs:
        if p.returncode is None:  # not reaped yet: its pid, the group id, cannot have been reused
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_start_time(pid) == t for pid, t in tree.items()):
        time.sleep(0.2)
    for p in procs:
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for pid, started in tree.items():
        if _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for p in procs:
        p.wait(timeout=10)


def _wait_started(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"`ray start` did not start a node (exit code {proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    if not RAY.exists():
        pytest.skip(f"the `ray` command line is not installed beside {sys.executable}")
    # Ray's unix socket paths (<temp>/session_<date>_<pid>/sockets/...) must stay under 108 bytes.
    temp = Path(tempfile.mkdtemp(prefix="mi-rc-", dir="/tmp"))
    token = secrets.token_hex(32)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    port = _free_port()
    # Every port is chosen here or by the OS: two nodes share this machine, and other Ray instances may too.
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(NODE_CPUS), "--num-gpus", "0",
              "--object-store-memory", str(150 * 1024**2), "--disable-usage-stats", "--temp-dir", str(temp),
              "--min-worker-port", "0", "--max-worker-port", "0", "--log-style", "record"]
    nodes = {
        "head": ["--head", "--port", str(port), "--include-dashboard=false", "--dashboard-port", str(_free_port()),
                 "--ray-client-server-port", str(_free_port())],
        "node": ["--address", f"127.0.0.1:{port}", "--include-log-monitor", "false"],
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in nodes.items():
            log = temp / f"{name}.log"
            with log.open("wb") as out:
                procs.append(subprocess.Popen(
                    [str(RAY), "start", *args, *common, "--dashboard-agent-listen-port", str(_free_port())],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    start_new_session=True))
            _wait_started(procs[-1], log)
        yield RayCluster(f"127.0.0.1:{port}", token, temp)
    finally:
        _stop(procs)
        shutil.rmtree(temp, ignore_errors=True)


def _cli_env(tmp_path: Path, cache_dir: Path, cluster: RayCluster, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        MEDIAINDEX_INDEX_DIR=str(tmp_path / "index"),
        MEDIAINDEX_CACHE_DIR=str(cache_dir),
        MEDIAINDEX_TEMP_DIR=str(cluster.temp_dir / "cli"),
        MEDIAINDEX_INDEX__BACKEND="server",
        # qdrant-client's in-process mode stands in for a Qdrant server: one writer, the CLI.
        MEDIAINDEX_INDEX__URL=f"local:{tmp_path / 'qdrant-server'}",
        MEDIAINDEX_LOG="INFO",
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token or cluster.token,
    )
    env.update({f"MEDIAINDEX_RAY__STAGES__{stage}__CPUS": cpus for stage, cpus in STAGE_CPUS.items()})
    return env


def _run(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    # From the checkout: Ray puts the driver's working directory on its workers' import path.
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def test_ingest_spreads_over_a_two_node_cluster(ray_cluster: RayCluster, tmp_path: Path, cache_dir: Path) -> None:
    env = _cli_env(tmp_path, cache_dir, ray_cluster)
    files = [media(rel) for rel in FILES]
    result = _run("ingest", *map(str, files), "--address", ray_cluster.address, env=env)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "Traceback" not in result.stderr
    assert f"joined the Ray cluster at {ray_cluster.address}" in result.stderr
    assert "on 2 Ray nodes" in result.stderr, result.stderr[-5000:]
    done = next(line for line in result.stderr.splitlines() if line.startswith("done: "))
    assert done.startswith(f"done: {len(files)} files indexed (") and "failed" not in done, done

    # Each file indexed exactly once, on the first attempt, as its own video.
    (job,) = json.loads(_run("jobs", "--json", env=env).stdout)
    assert (job["state"], job["counts"]) == ("done", {"done": len(files)})
    detail = json.loads(_run("jobs", job["id"], "--json", env=env).stdout)
    assert sorted((f["path"], f["state"], f["attempts"], f["reason"]) for f in detail["files"]) == sorted(
        (str(f), "done", 1, "") for f in files)
    assert len({f["video_id"] for f in detail["files"]}) == len(files)

    found = _run("search", "ask not what your country can do for you", "--json", env=env)
    assert found.returncode == 0, found.stderr[-3000:]
    best = json.loads(found.stdout)[0]
    assert Path(best["source"]).name == "jfk.flac"
    assert "ask not what your country" in best["text"].lower()


def test_a_wrong_token_is_refused_clearly(ray_cluster: RayCluster, tmp_path: Path, cache_dir: Path) -> None:
    env = _cli_env(tmp_path, cache_dir, ray_cluster, token=secrets.token_hex(32))
    env["RAY_gcs_server_port_wait_time_s"] = "2"  # Ray's connect attempts, one a second (default: 20)
    result = _run("ingest", str(media("audio/english.wav")), "--address", ray_cluster.address, env=env, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    message = " ".join(result.stderr.split())
    assert f"cannot join the Ray cluster at '{ray_cluster.address}'" in message, message[-3000:]
    assert "is RAY_AUTH_TOKEN the cluster's token" in message
    assert "Traceback" not in result.stderr


_PLACEMENT_SCRIPT = """
import sys
import mediaindex.workers
from mediaindex.config import load_settings
from mediaindex.serving import DisaggConfig, EngineConfig, WorkerResources
from mediaindex.serving.disagg import DisaggregatedLLM
from mediaindex.workers.runtime import ensure_ray
from transformers import LlamaConfig, LlamaForCausalLM

settings = load_settings("cpu", index_dir=sys.argv[1] + "/index", cache_dir=sys.argv[1] + "/cache")
settings.ray.num_gpus = 2  # logical GPUs: Ray assigns them exactly as it would real ones
ensure_ray(settings)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
res = WorkerResources(num_cpus=0.5, num_gpus=0.25)
cfg = DisaggConfig(prefill=EngineConfig(num_pages=4), decode=EngineConfig(num_pages=4, kv_cache_dtype="fp8_e4m3"),
                   prefill_resources=res, decode_resources=res)
llm = DisaggregatedLLM.start((model, None), cfg)
stats = llm.stats()
print("GPUS", stats["prefill"]["gpu_ids"], stats["decode"]["gpu_ids"])
llm.close()
"""


def test_workers_get_different_gpus_in_a_two_gpu_cluster() -> None:
    """A fresh Ray with two logical GPUs (in a subprocess: the test session's Ray has none): two quarter-GPU workers,
    which Ray alone would pack onto one device, get one GPU each."""
    with tempfile.TemporaryDirectory(prefix="mi-pg-") as tmp:
        env = {**os.environ, "MEDIAINDEX_TEMP_DIR": tmp}
        env.pop("RAY_ADDRESS", None)
        done = subprocess.run([sys.executable, "-c", _PLACEMENT_SCRIPT, tmp], env=env, capture_output=True, text=True,
                              timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("GPUS")), None)
    assert line is not None, done.stderr[-3000:]
    assert line == "GPUS ['0'] ['1']" or line == "GPUS ['1'] ['0']"
