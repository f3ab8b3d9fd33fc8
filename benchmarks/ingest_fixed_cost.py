"""The whole process, as a user meets it: `mediaindex ingest` against a plain single-process script.

    python benchmarks/ingest_fixed_cost.py [--repeats 2] [--sides baseline,mediaindex,ray] [--copies N] [--json OUT]

Two inputs: (a) the ten sample videos plus jfk.flac, (b) jfk.flac alone (11 s); with `--copies N` a third. For
each input and repeat every side runs as its own process, in alternating order (a shared machine's load
drifts), and the script measures:

- wall: from spawning the process to its exit (imports, model loads, Ray, the work, closing);
- first: when the first file was done (the CLI prints "indexed PATH", the baseline "first PATH"): the time a
  user waits for the first searchable file;
- CPU: user + system seconds of the process and every process it started and waited for (on a shared machine
  the wall time follows the load; the CPU seconds much less);
- peak RSS: of the process and every process it started (Ray's daemons and workers), sampled every 0.1 s;
- for the CLI, the phases it logs with MEDIAINDEX_LOG=INFO (Ray start, each stage's build, first calls,
  first file, drain, pipeline and index close).

Sides:
- baseline: this file run with --baseline: one process, no Ray, no index: Whisper base int8 over each file's
  audio one file after another (the project's SpeechModel, every core), RapidOCR (the project's ppocrv4 reader)
  and the classifier on one frame per shot (the project's decoder), the embedder over every text;
- script: this file run with --script: the script a user would write with the libraries' own calls: faster-whisper's
  `WhisperModel("base" bundled, int8).transcribe(path, vad_filter=True, word_timestamps=True)`, PySceneDetect's
  `detect(path, ContentDetector())` and OpenCV seeking to the middle of each shot for its frame, RapidOCR's
  `RapidOCR()` on that frame, the same classifier and embedder as the baseline;
- mediaindex: `python -m mediaindex ingest FILES` into a fresh index, the default settings (a small job runs in
  process);
- ray: the same with in-process runs turned off (MEDIAINDEX_INGEST__IN_PROCESS_MAX_FILES=0): the Ray pipeline's
  fixed cost;
- in-process: the same run in process whatever the job's size (for `--copies N`, N copies of the ten videos,
  where the default sends a job of more than 16 files or 900 s to Ray).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _media_root() -> Path:
    if os.environ.get("MEDIAINDEX_MEDIA_DIR"):
        return Path(os.environ["MEDIAINDEX_MEDIA_DIR"])
    for parent in REPO.parents:
        if (parent / "shared" / "media").is_dir():
            return parent / "shared" / "media"
    return REPO.parent / "shared" / "media"


def inputs(media: Path) -> dict[str, list[Path]]:
    videos = sorted(p for p in (media / "video").iterdir() if p.suffix.lower() in {".mp4", ".webm", ".mkv", ".mov"})
    jfk = media / "audio" / "jfk.flac"
    return {"jfk.flac (11 s)": [jfk], "sample set (10 videos + jfk.flac)": [*videos, jfk]}


# --- the baseline: one plain process ---------------------------------------------------------------------------

def _label_and_embed(classifier: Any, embedder: Any, frames: list[Any], texts: list[str]) -> int:
    """Both single-process sides: the classifier's best class per frame, then every text embedded."""
    if frames:
        probs, _ = classifier.scores(frames)
        texts += [str(int(p.argmax())) for p in probs]
    embedder.embed_passages([t for t in texts if t] or [""])
    return len(texts)


def baseline(files: list[str]) -> None:
    """Transcribe, read, classify and embed each file in turn, in this process; prints "first PATH" when the
    first file is done and a JSON summary at the end."""
    began = time.monotonic()
    from mediaindex.config import SpeechSettings, load_settings
    from mediaindex.media.decode import AudioStream, scan_video
    from mediaindex.media.probe import probe
    from mediaindex.models.classifier import ImageClassifier
    from mediaindex.models.ocr import TextReader
    from mediaindex.models.speech import SpeechModel
    from mediaindex.models.text_embed import load_text_embedder

    settings = load_settings("cpu")
    loads = time.monotonic()
    speech = SpeechModel(SpeechSettings(model="whisper-base", compute_type="int8", diarize=False),
                         settings.cache_dir)
    reader = TextReader(model="ppocrv4")
    classifier = ImageClassifier("efficientnet-lite0")
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    loaded = time.monotonic() - loads
    texts_total = 0
    for n, path in enumerate(files):
        info = probe(path)
        texts: list[str] = []
        if info.has_audio:
            stream = AudioStream(path, chunk_seconds=120.0, timeout=600.0)
            texts += [s.text for s in speech.transcribe_stream(stream).segments]
        if info.has_video:
            scan = scan_video(path, info, interval=1e9, max_side=settings.frames.max_side, samples=1)
            frames = [p.keyframe.image for p in scan.parts]
            for frame in frames:
                texts += [" ".join(line.text for line in reader.read(frame))]
        texts_total += _label_and_embed(classifier, embedder, frames if info.has_video else [], texts)
        if n == 0:
            print(f"first {path}", flush=True)
    print(json.dumps({"baseline_loads_s": round(loaded, 2), "baseline_wall_s": round(time.monotonic() - began, 2),
                      "texts": texts_total}), flush=True)


def script(files: list[str]) -> None:
    """The same work with each library's documented calls, as a plain script does it; prints "first PATH" when
    the first file is done and a JSON summary at the end."""
    began = time.monotonic()
    import av
    import cv2
    import numpy as np
    from faster_whisper import WhisperModel
    from rapidocr_onnxruntime import RapidOCR
    from scenedetect import ContentDetector, detect

    from mediaindex.config import load_settings
    from mediaindex.models.bundled import whisper_model_dir
    from mediaindex.models.classifier import ImageClassifier
    from mediaindex.models.text_embed import load_text_embedder

    settings = load_settings("cpu")
    loads = time.monotonic()
    whisper = WhisperModel(str(whisper_model_dir("whisper-base", settings.cache_dir / "models")), device="cpu",
                           compute_type="int8")
    ocr = RapidOCR()
    classifier = ImageClassifier("efficientnet-lite0")
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    loaded = time.monotonic() - loads
    texts_total = 0
    for n, path in enumerate(files):
        with av.open(path) as container:
            has_audio, has_video = bool(container.streams.audio), bool(container.streams.video)
            duration = (container.duration or 0) / 1e6
        texts: list[str] = []
        if has_audio:
            segments, _ = whisper.transcribe(path, vad_filter=True, word_timestamps=True)
            texts += [s.text for s in segments]
        if has_video:
            shots = [(a.seconds, b.seconds) for a, b in detect(path, ContentDetector())] or [(0, duration)]
            capture = cv2.VideoCapture(path)
            frames = []
            for start, end in shots:
                capture.set(cv2.CAP_PROP_POS_MSEC, (start + end) / 2 * 1000)
                ok, bgr = capture.read()
                if ok:
                    frames.append(bgr)
            capture.release()
            for bgr in frames:
                result, _ = ocr(bgr)
                texts += [" ".join(str(line[1]) for line in result or [])]
        rgb = [np.ascontiguousarray(f[:, :, ::-1]) for f in frames] if has_video else []
        texts_total += _label_and_embed(classifier, embedder, rgb, texts)
        if n == 0:
            print(f"first {path}", flush=True)
    print(json.dumps({"script_loads_s": round(loaded, 2), "script_wall_s": round(time.monotonic() - began, 2),
                      "texts": texts_total}), flush=True)


# --- the driver -------------------------------------------------------------------------------------------------

class Watched:
    """A process whose output lines are timed as they come, and whose process tree's RSS is sampled."""

    def __init__(self, cmd: list[str], env: dict[str, str], first: re.Pattern[str]) -> None:
        self.began = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.first: float | None = None
        self.lines: list[tuple[float, str]] = []
        self.peak = 0
        self._exited = threading.Event()
        self._pattern = first
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            at = time.monotonic() - self.began
            self.lines.append((at, line.rstrip("\n")))
            if self.first is None and self._pattern.search(line):
                self.first = at

    def _sample(self) -> None:
        try:
            root = psutil.Process(self.proc.pid)
        except psutil.Error:
            return
        while not self._exited.is_set():  # not proc.poll(): that would reap the child before wait4 sees it
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def wait(self, timeout: float) -> tuple[float, float]:
        """Wall seconds and CPU seconds (user + system of the process and the descendants it waited for)."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self._exited.set()
                break
            if time.monotonic() > deadline:
                self.proc.kill()
            time.sleep(0.05)
        wall = time.monotonic() - self.began
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._reader.join(5)
        self._sampler.join(5)
        return wall, usage.ru_utime + usage.ru_stime


_PHASES = [
    ("ray_start_s", re.compile(r"started a local Ray instance in ([\d.]+) s")),
    ("pipeline_ready_s", re.compile(r"Ray pipeline ready in ([\d.]+) s")),
    ("index_open_s", re.compile(r"index \S+ opened in ([\d.]+) s")),
    ("first_written_s", re.compile(r"first file written \(searchable\) at ([\d.]+) s")),
    ("stages_s", re.compile(r"files written in ([\d.]+) s")),
    ("drain_s", re.compile(r"drain after the last file entered the stages ([\d.]+) s")),
    ("pipeline_close_s", re.compile(r"pipeline closed in ([\d.]+) s")),
    ("index_close_s", re.compile(r"index closed in ([\d.]+) s")),
]
_BUILT = re.compile(r"stage (\w+): (?:built in this process in|actor ready [\d.]+ s after its spawn \(its models "
                    r"loaded in) ([\d.]+) s")
_FIRST_CALL = re.compile(r"ingest: (\w+) stage's first call at ([\d.]+) s")


def phases(lines: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    built: dict[str, float] = {}
    first_call: dict[str, float] = {}
    for line in lines:
        for key, pattern in _PHASES:
            if m := pattern.search(line):
                out[key] = float(m[1])
        if m := _BUILT.search(line):
            built[m[1]] = float(m[2])
        if m := _FIRST_CALL.search(line):
            first_call[m[1]] = float(m[2])
    out["stage_build_s"] = built
    out["stage_first_call_at_s"] = first_call
    return out


SIDES = ("baseline", "script", "mediaindex", "in-process", "ray")


def run_side(side: str, files: list[Path], work: Path, timeout: float) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEDIAINDEX_LOG": "INFO"}
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "MEDIAINDEX_RAY_OWNER", "RAY_ADDRESS"):
        env.pop(var, None)
    if side in ("baseline", "script"):
        cmd = [sys.executable, str(Path(__file__).resolve()), f"--{side}", *map(str, files)]
        first = re.compile(r"^first ")
    else:
        folder = Path(tempfile.mkdtemp(prefix="i", dir=work))
        env.update(MEDIAINDEX_INDEX_DIR=str(folder / "index"), MEDIAINDEX_TEMP_DIR=str(folder / "t"))
        if side == "ray":
            env["MEDIAINDEX_INGEST__IN_PROCESS_MAX_FILES"] = "0"
        elif side == "in-process":  # whatever the job's size
            env.update(MEDIAINDEX_INGEST__IN_PROCESS_MAX_FILES="1000000", MEDIAINDEX_INGEST__IN_PROCESS_MAX_SECONDS="1e9")
        cmd = [sys.executable, "-m", "mediaindex", "ingest", *map(str, files)]
        first = re.compile(r"^indexed\s")
    watched = Watched(cmd, env, first)
    wall, cpu = watched.wait(timeout)
    lines = [line for _, line in watched.lines]
    result: dict[str, object] = {"side": side, "rc": watched.proc.returncode, "wall_s": round(wall, 2),
                                 "cpu_s": round(cpu, 1),
                                 "first_s": round(watched.first, 2) if watched.first is not None else None,
                                 "peak_rss_gib": round(watched.peak / 2**30, 2),
                                 "load_average": [round(x, 1) for x in os.getloadavg()]}
    if side in ("baseline", "script"):
        summary = next((json.loads(line) for line in reversed(lines) if line.startswith("{")), {})
        result.update(summary)
    else:
        result["indexed"] = sum(1 for line in lines if line.startswith("indexed"))
        result["phases"] = phases(lines)
    if watched.proc.returncode != 0:
        result["tail"] = lines[-15:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--script", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sides", default="baseline,mediaindex,ray")
    parser.add_argument("--set-sides", help="sides for the sample set, if not --sides (e.g. baseline,mediaindex)")
    parser.add_argument("--only", choices=["set", "one", "copies"], help="run one input only")
    parser.add_argument("--copies", type=int, default=0,
                        help="also ingest N copies of the ten videos (each copy's files made distinct by a trailing "
                             "byte string), for where running in process stops paying")
    parser.add_argument("--copies-sides", default="in-process,ray", help="sides for the copies")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds one process may run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.baseline:
        baseline(args.baseline)
        return
    if args.script:
        script(args.script)
        return
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = set(sides) - set(SIDES)
    if unknown or not sides:
        parser.error(f"--sides takes {', '.join(SIDES)} (got {args.sides!r})")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    media = _media_root()
    if not (media / "video").is_dir():
        parser.error(f"no media at {media} (set MEDIAINDEX_MEDIA_DIR)")
    if args.only == "copies" and args.copies < 1:
        parser.error("--only copies needs --copies N")
    from mediaindex.media.probe import probe

    work = Path(tempfile.mkdtemp(prefix="mi-fixed-"))
    sets = inputs(media)
    if args.only in ("set", "one"):
        sets = dict([list(sets.items())[1 if args.only == "set" else 0]])
    elif args.only == "copies":
        sets = {}
    copies_name = f"{args.copies} copies of the ten videos"
    if args.copies:
        from benchmarks.pipeline_throughput import make_archive

        sets[copies_name] = make_archive(media / "video", work / "archive", args.copies)

    results: dict[str, object] = {
        "machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB",
        "python": platform.python_version(), "load_average_start": [round(x, 1) for x in os.getloadavg()],
        "inputs": {}}
    try:
        for name, files in sets.items():
            media_s = sum(probe(f).duration for f in files)
            runs: list[dict[str, object]] = []
            these = sides
            if name == copies_name:
                these = [s.strip() for s in args.copies_sides.split(",") if s.strip() in SIDES]
            elif args.set_sides and len(files) > 1:
                these = [s.strip() for s in args.set_sides.split(",") if s.strip() in SIDES]
            for r in range(args.repeats):
                order = these if r % 2 == 0 else list(reversed(these))
                for side in order:
                    result = run_side(side, files, work, args.timeout)
                    result["repeat"] = r
                    runs.append(result)
                    print(f"{name} #{r} {side:10s} wall {result['wall_s']:7.2f} s, CPU {result['cpu_s']} s, "
                          f"first {result['first_s']} s, "
                          f"peak RSS {result['peak_rss_gib']} GiB, load {result['load_average']}", flush=True)
            summary: dict[str, object] = {}
            for side in these:
                mine = [x for x in runs if x["side"] == side and x["rc"] == 0]
                if mine:
                    summary[side] = {
                        "wall_s_median": round(sorted(float(x["wall_s"]) for x in mine)[len(mine) // 2], 2),
                        "wall_s_min": round(min(float(x["wall_s"]) for x in mine), 2),
                        "cpu_s_median": round(sorted(float(x["cpu_s"]) for x in mine)[len(mine) // 2], 1),
                        "first_s_min": min(float(x["first_s"] or 0) for x in mine),
                        "peak_rss_gib_max": max(float(x["peak_rss_gib"]) for x in mine)}
            for reference in ("baseline", "script", "ray"):
                if reference not in summary:
                    continue
                base = [x for x in runs if x["side"] == reference and x["rc"] == 0]
                for side in these:
                    if side == reference or side not in summary:
                        continue
                    # Each run against the reference run next to it (same repeat): the pairs share the load.
                    ratios = []
                    for x in runs:
                        if x["side"] == side and x["rc"] == 0:
                            pair = next((b for b in base if b["repeat"] == x["repeat"]), None)
                            if pair:
                                ratios.append(round(float(x["wall_s"]) / float(pair["wall_s"]), 2))
                    summary[side][f"wall_vs_{reference}_per_repeat"] = ratios  # type: ignore[index]
            results["inputs"][name] = {"files": len(files), "media_s": round(media_s, 1), "runs": runs,  # type: ignore[index]
                                       "summary": summary}
            print(json.dumps({name: summary}, indent=2), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
