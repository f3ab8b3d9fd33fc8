"""What a reorganised archive costs: a folder indexed, then moved and renamed, ingested at its new place (the
entries follow the files by their bytes) against indexing the same files again (`--reindex`, which is what every
moved file cost before). Each step is one `mediaindex ingest` process, as a user runs it; wall time and the CPU
seconds the whole machine spent meanwhile (Ray's workers are not the command's children: run it on a quiet
machine).

    python benchmarks/moved_files.py                       # ../shared/media-val, several minutes on 2 cores
    python benchmarks/moved_files.py --media DIR --json benchmarks/out/moved_files.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from benchmarks.faults import cli, make_env  # noqa: E402


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy since boot (user, nice, system, interrupts), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed(args: list[str], env: dict[str, str]) -> dict[str, float | str]:
    before, began = busy_seconds(), time.perf_counter()
    done = cli(args, env, timeout=3600)
    wall, cpu = time.perf_counter() - began, busy_seconds() - before
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    last = [line for line in done.stderr.splitlines() if line.startswith("done:")]
    return {"wall_s": round(wall, 1), "machine_cpu_s": round(cpu, 1), "said": last[-1] if last else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--media", type=Path, default=ROOT.parent / "shared" / "media-val")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="moved-"))
    try:
        first = base / "archive"
        shutil.copytree(args.media, first, ignore=shutil.ignore_patterns("*.md", "*.yaml", "*.json", "*.srt",
                                                                          "*.vtt", "*.txt"))
        env = make_env(base, "index")
        results = {"indexed": timed(["ingest", str(first)], env)}
        # Reorganised: the folder moved, and every file renamed into a folder of its own kind.
        moved = base / "reorganised"
        first.rename(moved)
        for path in sorted(p for p in moved.rglob("*") if p.is_file()):
            target = moved / "by-kind" / path.suffix.lstrip(".") / f"renamed-{path.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
        results["moved, ingested at its new place"] = timed(["ingest", str(moved)], env)
        results["the same files indexed again (--reindex)"] = timed(["ingest", str(moved), "--reindex"], env)
        report = {"media": str(args.media), "files": sum(1 for p in moved.rglob("*") if p.is_file()),
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load": os.getloadavg(),
                  "date": time.strftime("%Y-%m-%d"), "results": results}
        print(json.dumps(report, indent=2))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
