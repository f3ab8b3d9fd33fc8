"""Where the CPU of an ingest goes: CPU seconds per stage and per model, against the fixed-cost baseline's.

    python benchmarks/ingest_cpu_profile.py [FILES...] [--sides mediaindex,baseline,live] [--json OUT]

Without FILES: the sample set of `ingest_fixed_cost.py` (the ten sample videos plus jfk.flac). Each side
runs in this process, one file and one stage after another (nothing overlaps, so every CPU second is the
stage's own), and counts the CPU seconds (user + system of every thread of this process, and of the ffmpeg
processes it waits for) spent in each piece of work:

- mediaindex: the in-process pipeline's stages built as `mediaindex ingest` builds them (`default_stages`,
  same thread counts), then for each file decode (probe, content hash, the video scan, thumbnails), speech
  (the stereo look, Whisper with its VAD, the voice encoder's windows, the clustering), vision (perceptual
  hashes, the classifier, OCR), embed, and the index write (`write_item` into a fresh index);
- baseline: the pieces of `ingest_fixed_cost.py --baseline` (Whisper base int8 without diarization, one
  frame per shot for RapidOCR ppocrv4 and the classifier, the embedder).

A piece nested in another (the voice encoder inside Whisper's stream) is counted once, in the inner one.
Model loads are reported apart. Not counted: the CLI, the job store, thread hand-offs of the real run.

- live: `mediaindex ingest FILES` as the CLI runs it, inside this process (a small job: its stages on threads,
  side by side), and its CPU per OS thread name, sampled from /proc: the stages' threads are named mi-STAGE
  and the thread pools their models start take the name with them; "python" is the CLI's own thread (the
  scheduler and the index writes) and whatever was started from it. What running side by side adds to the
  stages' own CPU (threads waiting by spinning, caches shared) shows against the mediaindex side.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Ledger:
    """CPU seconds per named piece; a piece entered inside another pauses the outer one."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[str] = []
        self._mark = cpu_now()

    def _charge(self) -> None:
        now = cpu_now()
        if self._stack:
            self.cpu[self._stack[-1]] += now - self._mark
        self._mark = now

    @contextmanager
    def piece(self, name: str) -> Iterator[None]:
        self._charge()
        self._stack.append(name)
        self.calls[name] += 1
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """Count every call of `owner.attr` (a module function or a bound method) as `name`."""
        original: Callable[..., Any] = getattr(owner, attr)

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.piece(name):
                return original(*args, **kwargs)

        setattr(owner, attr, counted)


def profile_mediaindex(files: list[str], ledger: Ledger) -> dict[str, float]:
    from mediaindex.config import load_settings
    from mediaindex.index.index import open_index
    from mediaindex.models import speakers as speakers_mod
    from mediaindex.models.vision import vector_dims
    from mediaindex.pipeline.spec import default_stages
    from mediaindex.pipeline.stages import decode as decode_mod
    from mediaindex.pipeline.stages import speech as speech_mod
    from mediaindex.pipeline.stages import vision as vision_mod
    from mediaindex.pipeline.stages.registry import StageName
    from mediaindex.pipeline.write import write_item

    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="mi-cpu-") as tmp:
        settings = load_settings(index_dir=Path(tmp) / "index")
        loads: dict[str, float] = {}
        stages: dict[StageName, Any] = {}
        for spec in default_stages(settings):
            began = cpu_now()
            stages[spec.name] = spec.build(settings)
            loads[spec.name.value] = round(cpu_now() - began, 2)
        embedder = stages[StageName.EMBED].embedder
        index = open_index(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision))
        ledger.wrap(decode_mod, "probe", "decode: probe")
        ledger.wrap(decode_mod, "content_hash", "decode: content hash")
        ledger.wrap(decode_mod, "scan_video", "decode: video scan (decode, shots, samples)")
        ledger.wrap(decode_mod, "encode_thumbnail", "decode: thumbnails")
        ledger.wrap(speech_mod, "probe", "speech: probe")
        ledger.wrap(speech_mod, "channel_look", "speech: stereo look")
        speech = stages[StageName.SPEECH]
        ledger.wrap(speech.model, "transcribe_stream", "speech: Whisper (audio decode, VAD, decode)")
        ledger.wrap(speakers_mod.SpeakerTrack, "add", "speech: voice encoder windows")
        ledger.wrap(speakers_mod.SpeakerTrack, "turns", "speech: speaker clustering")
        vision = stages.get(StageName.VISION)
        if vision is not None:
            ledger.wrap(vision_mod, "difference_hash", "vision: perceptual hashes")
            if vision.classifier is not None:
                ledger.wrap(vision.classifier, "scores", "vision: classifier")
            if vision.reader is not None:
                ledger.wrap(vision.reader, "read", "vision: OCR")
            if vision.people is not None:
                ledger.wrap(vision.people, "best", "vision: people")
        embed = stages[StageName.EMBED]
        ledger.wrap(embed.embedder, "embed_passages", "embed: embedder")
        for path in files:
            with ledger.piece("decode: other"):
                item = stages[StageName.DECODE].process(path)
            with ledger.piece("speech: other"):
                result = speech.process(path)
            item = result.join(item)
            if vision is not None:
                with ledger.piece("vision: other"):
                    item = vision.process(item)
            with ledger.piece("embed: other"):
                item = embed.process(item)
            with ledger.piece("index write"):
                write_item(index, item, {})
            print(f"  {Path(path).name}: {len(item.segments)} segments", flush=True)
        index.close()
    return loads


def profile_baseline(files: list[str], ledger: Ledger) -> dict[str, float]:
    import ingest_fixed_cost  # noqa: F401  (the same imports the baseline makes)

    from mediaindex.config import SpeechSettings, load_settings
    from mediaindex.media.decode import AudioStream, scan_video
    from mediaindex.media.probe import probe
    from mediaindex.models.classifier import ImageClassifier
    from mediaindex.models.ocr import TextReader
    from mediaindex.models.speech import SpeechModel
    from mediaindex.models.text_embed import load_text_embedder

    settings = load_settings("cpu")
    loads: dict[str, float] = {}
    began = cpu_now()
    speech = SpeechModel(SpeechSettings(model="whisper-base", compute_type="int8", diarize=False), settings.cache_dir)
    loads["speech"] = round(cpu_now() - began, 2)
    began = cpu_now()
    reader = TextReader(model="ppocrv4")
    classifier = ImageClassifier("efficientnet-lite0")
    loads["vision"] = round(cpu_now() - began, 2)
    began = cpu_now()
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    loads["embed"] = round(cpu_now() - began, 2)
    for path in files:
        with ledger.piece("decode: probe"):
            info = probe(path)
        texts: list[str] = []
        if info.has_audio:
            with ledger.piece("speech: Whisper (audio decode, VAD, decode)"):
                stream = AudioStream(path, chunk_seconds=120.0, timeout=600.0)
                texts += [s.text for s in speech.transcribe_stream(stream).segments]
        if info.has_video:
            with ledger.piece("decode: video scan (decode, shots, samples)"):
                scan = scan_video(path, info, interval=1e9, max_side=settings.frames.max_side, samples=1)
            frames = [p.keyframe.image for p in scan.parts]
            with ledger.piece("vision: OCR"):
                for frame in frames:
                    texts += [" ".join(line.text for line in reader.read(frame))]
            if frames:
                with ledger.piece("vision: classifier"):
                    probs, _ = classifier.scores(frames)
                texts += [str(int(p.argmax())) for p in probs]
        with ledger.piece("embed: embedder"):
            embedder.embed_passages([t for t in texts if t] or [""])
        print(f"  {Path(path).name}: {len(texts)} texts", flush=True)
    return loads


class ThreadCPU:
    """CPU seconds per OS thread name of this process, sampled from /proc every `every` seconds (a thread
    that ends between two samples loses at most that long of its CPU). The in-process stages name their
    threads mi-STAGE, and the pools their models start inherit the name."""

    def __init__(self, every: float = 0.1) -> None:
        import threading

        self.last: dict[int, tuple[str, float]] = {}
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            self.last[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / self._tick)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> ThreadCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def by_name(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for name, cpu in self.last.values():
            out[name] += cpu
        return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def profile_live(files: list[str]) -> dict[str, Any]:
    """`mediaindex ingest FILES` as the CLI runs it, in this process (stages on threads, overlapping), its CPU
    per thread name; ffmpeg's processes (the audio decode) counted apart."""
    from mediaindex.cli.app import app

    with tempfile.TemporaryDirectory(prefix="mi-cpu-") as tmp:
        os.environ["MEDIAINDEX_INDEX_DIR"] = str(Path(tmp) / "index")
        began, children, wall = cpu_now(), os.times(), time.monotonic()
        with ThreadCPU() as threads:
            try:
                app(["ingest", *files], standalone_mode=False)
            finally:
                os.environ.pop("MEDIAINDEX_INDEX_DIR", None)
        after = os.times()
        import resource

        return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                "total_cpu_s": round(cpu_now() - began, 2), "wall_s": round(time.monotonic() - wall, 2),
                "threads_cpu_s": threads.by_name(),
                "ffmpeg_processes_cpu_s": round(after.children_user + after.children_system
                                                - children.children_user - children.children_system, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--sides", default="mediaindex,baseline")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from ingest_fixed_cost import _media_root, inputs

    files = args.files or [str(p) for p in inputs(_media_root())["sample set (10 videos + jfk.flac)"]]
    out: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                           "load_average_start": [round(x, 1) for x in os.getloadavg()], "sides": {}}
    for side in [s.strip() for s in args.sides.split(",") if s.strip()]:
        ledger = Ledger()
        print(f"{side}:", flush=True)
        if side == "live":
            out["sides"][side] = profile_live(files)
            print(json.dumps(out["sides"][side], indent=2), flush=True)
            continue
        began, wall = cpu_now(), time.monotonic()
        loads = (profile_mediaindex if side == "mediaindex" else profile_baseline)(files, ledger)
        total = cpu_now() - began
        pieces = {k: round(v, 2) for k, v in sorted(ledger.cpu.items(), key=lambda kv: -kv[1])}
        out["sides"][side] = {"loads_cpu_s": loads, "work_cpu_s": round(sum(ledger.cpu.values()), 2),
                              "total_cpu_s": round(total, 2), "wall_s": round(time.monotonic() - wall, 2),
                              "pieces_cpu_s": pieces, "calls": dict(ledger.calls)}
        print(json.dumps(out["sides"][side], indent=2), flush=True)
    out["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k != "sides"}))


if __name__ == "__main__":
    main()
