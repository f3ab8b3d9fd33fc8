"""Peak memory of the media and speech stages on a short and a long video: it should not grow with length.

    python benchmarks/media_memory.py [--media DIR] [--repeat 40] [--model tiny.en] [--no-speech]

Builds a long video at run time by joining `video/manifesto.mp4` to itself `--repeat` times (stream
copy, into a temporary folder), then runs the decode stage (probe, one-pass shot detection and
keyframes, thumbnails) and the speech stage (audio streamed in chunks, VAD, transcription) in a fresh
process per file, and prints each process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from mediaindex.config import load_settings
from mediaindex.pipeline.stages.decode import decode_media
settings = load_settings("cpu", index_dir={index!r}, speech={{"model": {model!r}, "cpu_threads": 2}})
t0 = time.perf_counter()
item = decode_media({path!r}, settings)
t1 = time.perf_counter()
rss_decode = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
segments = 0
if {speech!r}:
    from mediaindex.pipeline.stages.speech import SpeechStage
    item = SpeechStage(settings).process(item)
    segments = len(item.segments)
t2 = time.perf_counter()
print(json.dumps(dict(duration=item.info.duration, keyframes=len(item.keyframes), shots=len(item.shots),
    segments=segments, decode_s=t1 - t0, speech_s=t2 - t1, rss_decode_mb=rss_decode,
    rss_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def build_long(src: Path, repeat: int, out: Path) -> Path:
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    listing = out / "list.txt"
    listing.write_text("".join(f"file '{src}'\n" for _ in range(repeat)), encoding="utf-8")
    target = out / f"manifesto-x{repeat}.mp4"
    subprocess.run([ffmpeg_exe(), "-nostdin", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0",
                    "-i", str(listing), "-c", "copy", str(target)], check=True)
    return target


def measure(path: Path, index: Path, model: str, speech: bool) -> dict:
    code = CHILD.format(repo=str(REPO), index=str(index), model=model, path=str(path), speech=speech)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--media", type=Path,
                        default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", REPO.parent / "shared" / "media")))
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--no-speech", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    src = (args.media / "video" / "manifesto.mp4").resolve()
    with tempfile.TemporaryDirectory(prefix="mediaindex-mem-") as tmp:
        t = time.perf_counter()
        long = build_long(src, args.repeat, Path(tmp))
        print(f"built {long.name} ({long.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
        print("| file | duration s | shots | keyframes | segments | decode s | speech s | peak RSS after decode MB | peak RSS MB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for path in (src, long):
            r = measure(path, Path(tmp) / f"index-{path.stem}", args.model, not args.no_speech)
            print(f"| {path.name} | {r['duration']:.0f} | {r['shots']} | {r['keyframes']} | {r['segments']} | "
                  f"{r['decode_s']:.1f} | {r['speech_s']:.1f} | {r['rss_decode_mb']:.0f} | {r['rss_peak_mb']:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
