"""Batch ingestion throughput: each stage alone, the whole pipeline, and peak memory as the archive grows.

The archive is ../shared/media/video copied N times into a temporary folder; each copy gets a few
bytes appended (players ignore them) so that every file has its own content hash and is indexed.

    python benchmarks/pipeline_throughput.py --copies 1 3 [--media DIR] [--json OUT]

Measures, on one Pipeline whose models are loaded once (loading is not timed):
- stage alone: every file of one copy through one stage at a time (inputs prepared beforehand),
  media seconds per wall second of the stage's whole pool;
- pipeline: `ingest` over N copies into a fresh index: media hours per wall hour, and that speed as
  a fraction of the slowest stage alone (1.0 = perfect overlap, no overhead);
- peak RSS of the driver plus every process it started (Ray's daemons and workers), sampled;
- CPU seconds of each stage's actors, of the driver (scheduling, index writes) and of the rest
  (Ray's daemons) over the pipeline run, and how full the machine's cores were.

Stage-alone speeds are measured before and after the pipeline runs and averaged, since a shared
machine's load drifts. On a machine with fewer cores than busy stages, the stages also compete for
the same CPUs, so the script reports a second bound: 1 / sum(1 / stage speed), the speed of running
the stages one after another on the same CPUs, which overlap alone cannot beat there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import mediaindex.raylib  # noqa: E402,F401  (Ray's environment is set before Ray is imported)
from mediaindex.config import load_settings  # noqa: E402
from mediaindex.index.index import MediaIndex  # noqa: E402
from mediaindex.media.probe import probe  # noqa: E402
from mediaindex.models.text_embed import load_text_embedder  # noqa: E402
from mediaindex.pipeline.discover import MEDIA_SUFFIXES  # noqa: E402
from mediaindex.service import IngestHooks, IngestRequest, Pipeline, ingest  # noqa: E402


def _default_media() -> Path:
    """shared/media/video beside the checkout or above it."""
    for parent in REPO.parents:
        if (parent / "shared" / "media" / "video").is_dir():
            return parent / "shared" / "media" / "video"
    return REPO.parent / "shared" / "media" / "video"


def make_archive(src: Path, dest: Path, copies: int) -> list[Path]:
    files = []
    originals = sorted(p for p in src.iterdir() if p.suffix.lower() in MEDIA_SUFFIXES)
    for n in range(copies):
        folder = dest / f"copy{n:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for original in originals:
            target = folder / original.name
            if not target.exists():
                shutil.copyfile(original, target)
                with target.open("ab") as fh:
                    fh.write(f"mediaindex-benchmark-copy-{n}".encode())
            files.append(target)
    return files


class PeakRSS:
    """Peak summed RSS of this process and all its descendants, sampled every 0.25 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a worker may exit between listing and reading
                total += proc.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.peak = max(self.peak, self._sample())

    def __enter__(self) -> PeakRSS:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class CPUTime:
    """CPU seconds (user + system) spent by each group of processes between enter and exit."""

    def __init__(self, stage_pids: dict[str, list[int]]) -> None:
        self.groups = {pid: name for name, pids in stage_pids.items() for pid in pids}
        self.groups[psutil.Process().pid] = "driver"
        self.spent: dict[str, float] = {}

    def _sample(self) -> dict[int, float]:
        me = psutil.Process()
        times = {}
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                times[proc.pid] = t.user + t.system
        return times

    def __enter__(self) -> CPUTime:
        self._start = self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        for pid, seconds in self._sample().items():
            group = self.groups.get(pid, "ray and others")
            self.spent[group] = self.spent.get(group, 0.0) + seconds - self._start.get(pid, 0.0)


def stage_pids(pipeline: Pipeline) -> dict[str, list[int]]:
    import ray

    return {name: ray.get([a.pid.remote() for a in handles]) for name, handles in pipeline.actors.items()}


def stage_alone(pipeline: Pipeline, files: list[Path], media: float) -> tuple[dict[str, float], dict[str, float]]:
    """Each stage over prepared inputs, one stage at a time: media seconds per wall second, and the
    CPU seconds its actors spent per media second."""
    import ray

    speeds: dict[str, float] = {}
    cpu_per_media: dict[str, float] = {}
    inputs: list = [str(f) for f in files]
    pids = stage_pids(pipeline)
    for k, spec in enumerate(pipeline.stages):
        actors = pipeline.actors[spec.name]
        with CPUTime(pids) as cpu:
            start = time.perf_counter()
            outputs = [actors[i % len(actors)].process.remote(x) for i, x in enumerate(inputs)]
            ray.wait(outputs, num_returns=len(outputs), fetch_local=False)
            speeds[spec.name] = media / (time.perf_counter() - start)
        cpu_per_media[spec.name] = cpu.spent.get(spec.name, 0.0) / media
        inputs = outputs  # the next stage starts from this stage's results, already computed
        print(f"  stage {k} {spec.name:8s} alone: {speeds[spec.name]:6.2f}x real time, "
              f"{cpu_per_media[spec.name]:.3f} CPU s per media s", flush=True)
    ray.get(inputs[0])  # surface any stage error
    return speeds, cpu_per_media


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 3], help="archive sizes, in copies of the set")
    parser.add_argument("--media", type=Path, default=_default_media())
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    if not args.media.is_dir():
        parser.error(f"no media folder at {args.media}")

    work = Path(tempfile.mkdtemp(prefix="mi-bench-"))
    settings = load_settings("cpu", index_dir=work / "index0", temp_dir=work / "t")
    embedder = load_text_embedder(settings.embed)
    results: dict = {"machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs, no GPU",
                     "python": platform.python_version(), "runs": []}
    try:
        with PeakRSS() as idle:
            began = time.perf_counter()
            pipeline = Pipeline(settings)
            start_s = time.perf_counter() - began
        # The fixed cost before the first file moves: Ray's start, the actors' spawn and their model loads.
        results["pipeline_start_s"] = round(start_s, 2)
        results["stage_build_s"] = {k: round(v, 2) for k, v in pipeline.built_in.items()}
        print(f"pipeline {[s.name for s in pipeline.stages]} ready in {start_s:.1f} s (models loaded in the "
              f"actors: {results['stage_build_s']}); RSS {idle.peak / 2**30:.2f} GiB", flush=True)
        one = make_archive(args.media, work / "archive", 1)
        media_one = sum(probe(str(f)).duration for f in one)
        before, cpu_before = stage_alone(pipeline, one, media_one)
        runs = []
        for copies in args.copies:
            files = make_archive(args.media, work / "archive", copies)
            media = media_one * copies
            run_settings = settings.model_copy(update={"index_dir": work / f"index{copies}"})
            pids = stage_pids(pipeline)
            with MediaIndex(run_settings, embedder.dim, embedder.name) as index, PeakRSS() as rss, \
                    CPUTime(pids) as cpu:
                final: list = []
                start = time.perf_counter()
                folders = [work / "archive" / f"copy{n:03d}" for n in range(copies)]
                report = ingest(IngestRequest(run_settings, folders), index, pipeline,
                                IngestHooks(on_tick=final.append))
                wall = time.perf_counter() - start
            # How much of the run each stage's pool was busy: the slowest stage near 1.0 means it never
            # waited for work (overlap and backpressure keep it fed), whatever the machine's load.
            busy = {s.name: round(s.busy / s.workers / wall, 2) for s in final[-1].stages}
            cpu_s = {k: round(v, 1) for k, v in cpu.spent.items()}
            runs.append((copies, len(files), media, wall, report, rss.peak, busy, cpu_s))
            print(f"  {len(files)} files: {media / wall:.2f}x real time in {wall:.0f} s; CPU s {cpu_s}", flush=True)
        after, cpu_after = stage_alone(pipeline, one, media_one)
        pipeline.close()
        speeds = {k: round((before[k] + after[k]) / 2, 2) for k in before}
        slowest = min(speeds, key=speeds.get)
        serial = 1 / sum(1 / v for v in speeds.values())
        cpu_need = {k: round((cpu_before[k] + cpu_after[k]) / 2, 4) for k in before}
        # What the cores allow if every stage kept its CPU cost alone: cores / CPU per media second.
        cpu_bound = (psutil.cpu_count() or 1) / sum(cpu_need.values())
        results.update(stage_alone_x_realtime=speeds, stage_alone_before=before, stage_alone_after=after,
                       stage_alone_cpu_s_per_media_s=cpu_need, serial_bound_x_realtime=round(serial, 2),
                       cpu_bound_x_realtime=round(cpu_bound, 2))
        for copies, n, media, wall, report, peak, busy, cpu_s in runs:
            speed = media / wall
            results["runs"].append({
                "copies": copies, "files": n, "media_s": round(media, 1), "wall_s": round(wall, 1),
                "media_h_per_wall_h": round(speed, 2), "slowest_stage": slowest,
                "fraction_of_slowest_stage": round(speed / speeds[slowest], 2),
                "fraction_of_serial_bound": round(speed / serial, 2),
                "fraction_of_cpu_bound": round(speed / cpu_bound, 2),
                "indexed": len(report.indexed), "failed": len(report.failed), "peak_rss_gib": round(peak / 2**30, 2),
                "busy_fraction_of_wall": busy, "cpu_s": cpu_s,
                "cores_used": round(sum(cpu_s.values()) / wall / (psutil.cpu_count() or 1), 2),
            })
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
