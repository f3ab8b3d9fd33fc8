"""Files dropped one after another into a folder `mediaindex ingest --watch` watches: how long each waits.

    python benchmarks/watch_small_jobs.py [--files audio/jfk.flac,audio/LJ002-0035.wav,audio/apollo11.mp3]
                                          [--repeats 2] [--json OUT]

Each repeat starts `python -m mediaindex ingest FOLDER --watch 1` on an empty folder and a fresh index, then
copies the files in one at a time (each a different recording: a copy of one indexed already is only noted); each
is a small job the command runs in its own process. Measured per file: the seconds from the copy to the command's "indexed PATH"
line (the watch's own wait for the file to stop changing, one to two looks, included); and for the run: the CPU
seconds and the peak RSS of the command and every process it started (sampled every 0.1 s). The first file pays
the models' loads; the later ones show what a job costs once the command has run one. For an A/B, run this file
from each checkout, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ingest_fixed_cost import Watched, _media_root  # noqa: E402


def _line_time(command: Watched, text: str, after: int, timeout: float = 300) -> tuple[float, int]:
    """When the command wrote a line holding `text` (seconds since it started), looking from line `after` on;
    and how many lines it had written by then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n, (at, line) in enumerate(command.lines[after:], start=after):
            if text in line:
                return at, n + 1
        time.sleep(0.02)
    said = "\n".join(line for _, line in command.lines)
    raise RuntimeError(f"no line with {text!r} in {timeout:g} s; the command wrote:\n{said}")


def run_once(files: list[Path]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mediaindex-watch-bench-") as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(Path(tmp) / "index"), "MEDIAINDEX_TEMP_DIR": tmp,
               "PYTHONPATH": str(REPO), "COLUMNS": "200"}
        command = Watched([sys.executable, "-m", "mediaindex", "ingest", str(folder), "--watch", "1"], env,
                          re.compile("^watching "))
        waits, seen = [], 0
        try:
            _, seen = _line_time(command, "watching ", seen)
            for n, file in enumerate(files):
                target = folder / f"{n}-{file.name}"
                copied = time.monotonic() - command.began
                shutil.copy(file, target)
                indexed, seen = _line_time(command, f"indexed    {target}", seen)
                waits.append(round(indexed - copied, 2))
        finally:
            command.proc.send_signal(signal.SIGINT)
            _, cpu = command.wait(60)
        return {"waits_s": waits, "cpu_s": round(cpu, 2), "peak_rss_gib": round(command.peak / 2**30, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="audio/jfk.flac,audio/LJ002-0035.wav,audio/apollo11.mp3",
                        help="files below the media folder, copied in this order")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    files = [_media_root() / name for name in args.files.split(",")]
    runs = [run_once(files) for _ in range(args.repeats)]
    for run in runs:
        print(json.dumps(run))
    if args.json:
        args.json.write_text(json.dumps({"files": args.files, "machine": platform.processor() or platform.machine(),
                                         "cpus": os.cpu_count(), "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
