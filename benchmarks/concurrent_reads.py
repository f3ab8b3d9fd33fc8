"""Reads and competing ingests beside a running `mediaindex ingest`, each its own process, as users run them in
several terminals: searches, `index stats`, `ask` and `transcript` from the CLI, searches through a `serve`
started beside the ingest, one ingest that waits for the running one and one that is refused (--no-wait).
Then checks that the running ingest finished, that nothing was lost or duplicated, and that no command
printed a traceback. The last lines should read zero where they say so.

    python benchmarks/concurrent_reads.py                    # about 3-5 minutes on 2 cores
    python benchmarks/concurrent_reads.py --json benchmarks/out/concurrent_reads.json

Everything runs in a temporary folder on the real sample media (see benchmarks/faults.py for its helpers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from benchmarks.faults import GOOD, MEDIA, cli, free_port, index_health, make_env, start_serve  # noqa: E402

SECOND = ["audio/jfk.flac", "audio/apollo11.mp3"]  # the waiting ingest: one file the running one has too
REFUSED = ["audio/hotwords.mp3"]
READS = [["search", "ask not what your country can do for you", "--json"], ["index", "stats", "--json"],
         ["search", "one two three", "--modality", "speech"], ["transcript", str(MEDIA / "audio/jfk.flac")]]
ASK = ["ask", "What did the speaker ask the Americans to do?"]  # once: the language model takes minutes here


def classify(done: subprocess.CompletedProcess[str]) -> str:
    text = done.stdout + done.stderr
    if "Traceback" in text:
        return "traceback"
    if done.returncode == 0:
        return "answered"
    if done.returncode == 2 and ("held by" in text or "try again" in text):
        return "told to wait"
    return "failed"


def read(env: dict[str, str], ingest: subprocess.Popen, args: list[str], results: list[dict]) -> None:
    """One CLI read; it counts as beside the ingest when it started while the ingest ran."""
    began, during = time.monotonic(), ingest.poll() is None
    done = cli(args, env, timeout=900)
    results.append({"command": " ".join(args[:2]) if args[0] == "index" else args[0], "rc": done.returncode,
                    "outcome": classify(done), "seconds": round(time.monotonic() - began, 1),
                    "during_ingest": during, "ended_during_ingest": ingest.poll() is None,
                    "said": " ".join((done.stdout + done.stderr).split())[-300:]})


def reader(env: dict[str, str], ingest: subprocess.Popen, first: int, results: list[dict]) -> None:
    """CLI reads, one after another, for as long as the ingest runs."""
    i = first
    while ingest.poll() is None:
        read(env, ingest, READS[i % len(READS)], results)
        i += 1


def api_reader(url: str, ingest: subprocess.Popen, results: list[dict]) -> None:
    import httpx

    while ingest.poll() is None:
        try:
            r = httpx.get(f"{url}/search", params={"q": "ask not what your country"}, timeout=120)
            outcome = "answered" if r.status_code == 200 else "told to wait" if r.status_code == 503 else "failed"
            results.append({"command": "GET /search", "rc": r.status_code, "outcome": outcome,
                            "during_ingest": True, "said": r.text[:200]})
        except httpx.HTTPError as exc:
            results.append({"command": "GET /search", "rc": None, "outcome": "failed", "during_ingest": True,
                            "said": str(exc)})
        time.sleep(1.0)


def run(base: Path) -> dict:
    env = make_env(base, "index")
    env.setdefault("MEDIAINDEX_LLM__MODEL", "smollm2")  # the small bundled model, as the tests use
    index_dir = Path(env["MEDIAINDEX_INDEX_DIR"])
    first = [MEDIA / g for g in GOOD]
    log = base / "ingest.txt"
    began = time.monotonic()
    with open(log, "w") as err:
        ingest = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", *map(str, first)], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=err)
    while not (index_dir / "holder.json").exists():
        if ingest.poll() is not None or time.monotonic() - began > 180:
            raise RuntimeError(f"the ingest did not take the index: {log.read_text()}")
        time.sleep(0.2)

    with open(base / "waiting.txt", "w") as err:
        waiting = subprocess.Popen([sys.executable, "-m", "mediaindex", "ingest", *(str(MEDIA / f) for f in SECOND)],
                                   env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    refused = cli(["ingest", "--no-wait", *(str(MEDIA / f) for f in REFUSED)], env)
    port = free_port()
    serve = start_serve(env, port, MEDIA, base / "serve.txt")

    results: list[dict] = []
    threads = [threading.Thread(target=reader, args=(env, ingest, n, results)) for n in (0, 2)]
    threads.append(threading.Thread(target=api_reader, args=(f"http://127.0.0.1:{port}", ingest, results)))
    threads.append(threading.Thread(target=read, args=(env, ingest, ASK, results)))
    for t in threads:
        t.start()
    ingest_rc = ingest.wait()
    ingest_seconds = round(time.monotonic() - began)
    for t in threads:
        t.join()
    waiting_rc = waiting.wait(timeout=900)
    serve.terminate()
    serve.wait(timeout=60)
    logs = {name: (base / f"{name}.txt").read_text(errors="replace")
            for name in ("ingest", "waiting", "serve")}
    health = index_health(index_dir, first + [MEDIA / f for f in SECOND])
    during = [r for r in results if r["during_ingest"]]

    def count(rows: list[dict], outcome: str) -> int:
        return sum(1 for r in rows if r["outcome"] == outcome)

    return {
        "ingest_exit_code": ingest_rc, "ingest_seconds": ingest_seconds,
        "reads_during_ingest": len(during), "reads_answered": count(during, "answered"),
        "cli_reads_ended_before_the_ingest": sum(1 for r in during if r.get("ended_during_ingest")),
        "reads_told_to_wait": count(during, "told to wait"), "reads_failed": count(during, "failed"),
        "by_command": {c: sum(1 for r in during if r["command"] == c) for c in sorted({r["command"] for r in during})},
        "competing_ingests": 2,
        "waiting_ingest_exit_code": waiting_rc,
        "waiting_ingest_said_whom": "waiting for `mediaindex ingest`" in logs["waiting"],
        "refused_ingest_exit_code": refused.returncode,
        "refused_ingest_said": " ".join(refused.stderr.split())[:200],
        "tracebacks": count(results, "traceback") + sum("Traceback" in text for text in logs.values())
        + ("Traceback" in refused.stderr),
        **health, "reads": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="Also write the results here")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (logs, index)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mediaindex-concurrent-"))
    started = time.perf_counter()
    try:
        results = run(base)
    finally:
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    results = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "load_average": os.getloadavg()[0], "seconds": round(time.perf_counter() - started), **results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results.items() if k != "reads"}, indent=2), file=sys.stderr)
    failed_writer = int(results["ingest_exit_code"] != 0) + int(results["waiting_ingest_exit_code"] != 0)
    summary = [
        ("reads started beside the running ingest", results["reads_during_ingest"]),
        ("  answered", results["reads_answered"]),
        ("  told plainly to wait", results["reads_told_to_wait"]),
        ("  failed otherwise", results["reads_failed"]),
        ("competing ingests (one waits, one --no-wait)", results["competing_ingests"]),
        ("ingests that did not exit 0", failed_writer),
        ("tracebacks shown", results["tracebacks"]),
        ("files lost", results["files_lost"]),
        ("duplicates", results["duplicates"]),
    ]
    for name, value in summary:
        print(f"{name:46s} {value}")


if __name__ == "__main__":
    main()
