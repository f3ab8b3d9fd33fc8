"""Peak memory and speed of the speaker pass (diarization) on a short and a two-hour recording.

    python benchmarks/speaker_memory.py [--media DIR] [--hours 2] [--json OUT]

Builds the long recording at run time by joining the audio of `video/manifesto.mp4` to itself (stream copy,
into a temporary folder), then, in a fresh process per file, streams the audio in parts of
`speech.chunk_seconds` exactly as the speech stage does, finds the speech regions with the same VAD, gathers the
speaker embeddings of each part (`SpeakerTrack.add`) and clusters them at the end (`SpeakerTrack.turns`).
Whisper is not run: its memory is measured by media_memory.py; this isolates what diarization adds.
Printed per file: audio seconds, windows embedded, speakers found, CPU seconds, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from mediaindex.config import load_settings
from mediaindex.media.decode import AudioStream
from mediaindex.models.speakers import SpeakerEncoder, SpeakerTrack
from mediaindex.models.speech import SAMPLE_RATE, speech_regions
settings = load_settings("cpu")
encoder = SpeakerEncoder("cpu", threads=1)
rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
track = SpeakerTrack(encoder)
t0, c0 = time.perf_counter(), time.process_time()
offset = 0.0
for part in AudioStream({path!r}, chunk_seconds=settings.speech.chunk_seconds):
    track.add(part, offset, speech_regions(part, settings.speech.vad_threshold))
    offset += len(part) / SAMPLE_RATE
turns = track.turns(None, settings.speech.speaker_threshold)
print(json.dumps(dict(audio_s=round(offset, 1), windows=len(track.vectors),
                      speakers=len({{t.speaker for t in turns}}), wall_s=round(time.perf_counter() - t0, 1),
                      cpu_s=round(time.process_time() - c0, 1), rss_after_load_mb=round(rss_loaded),
                      peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))))
"""


def joined_audio(src: Path, copies: int, out: Path) -> Path:
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    listing = out.with_suffix(".txt")
    listing.write_text("".join(f"file '{src}'\n" for _ in range(copies)))
    subprocess.run([ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0",
                    "-i", str(listing), "-vn", "-c:a", "copy", str(out)], check=True)
    return out


def measure(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), path=str(path))],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--media", type=Path, default=REPO.parent / "shared" / "media")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    src = args.media / "video" / "manifesto.mp4"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        copies = max(1, math.ceil(args.hours * 3600 / 88.6))
        long = joined_audio(src, copies, Path(tmp) / f"manifesto-x{copies}.m4a")
        for name, path in (("manifesto.mp4", src), (long.name, long)):
            row = {"file": name, **measure(path), "load_average": round(os.getloadavg()[0], 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
