"""Speech stage accuracy and speed on the shared media.

    python benchmarks/speech_bench.py [--media DIR] [--threads 2] [--skip-speed]

Prints: WER of Whisper base on the reference clips, word-timestamp checks (jfk "Americans", caption
agreement on manifesto.mp4), and real-time factors (audio seconds per wall second, decoding
included) of the speech stage over every file in video/ and audio/: sequential + VAD (the default),
batched + VAD, and sequential without VAD; then batched vs sequential on the long speech files.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.speech_metrics import caption_agreement, normalise, read_srt, wer  # noqa: E402
from mediaindex.config import SpeechSettings  # noqa: E402
from mediaindex.media.decode import AudioStream  # noqa: E402
from mediaindex.models.speech import SpeechModel, Transcript  # noqa: E402

REFERENCES = {
    "audio/jfk.flac": "And so my fellow Americans, ask not what your country can do for you, "
                      "ask what you can do for your country.",
    "audio/2412-153948-0000.flac": "IF THE READER WILL EXCUSE ME I WILL SAY NOTHING OF MY ANTECEDENTS NOR OF "
                                   "THE CIRCUMSTANCES WHICH LED ME TO LEAVE MY NATIVE COUNTRY THE NARRATIVE "
                                   "WOULD BE TEDIOUS TO HIM AND PAINFUL TO MYSELF",
    "audio/LJ002-0020.wav": "IN EIGHTEEN THIRTEEN",
    "audio/LJ002-0035.wav": "EIGHT THE PRESS YARD",
    "audio/english.wav": "one two three",
}
LONG_SPEECH = ["video/manifesto.mp4", "audio/multilingual.mp3", "audio/apollo11.mp3"]
MODES = {
    "sequential + VAD (default)": {"batched": False, "vad": True},
    "batched + VAD": {"batched": True, "vad": True},
    "sequential, no VAD": {"batched": False, "vad": False},
}
DEFAULT = "sequential + VAD (default)"


def run(model: SpeechModel, path: Path, **mode: bool) -> tuple[Transcript, float]:
    model.settings = model.settings.model_copy(update=mode)
    started = time.perf_counter()
    transcript = model.transcribe_stream(AudioStream(path, chunk_seconds=model.settings.chunk_seconds))
    return transcript, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[1]
    parser.add_argument("--media", type=Path, default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", repo.parent / "shared" / "media")))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mediaindex")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    media = args.media.resolve()

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average at start {os.getloadavg()[0]:.1f}")
    model = SpeechModel(SpeechSettings(model=args.model, cpu_threads=args.threads), args.cache)
    base = model.settings
    print(f"model: {args.model}, {base.compute_type}, {args.threads} threads, batch size {base.batch_size}\n")

    print("## WER (lower case, punctuation stripped, numbers spelled out)")
    print("| clip | WER | hypothesis |\n|---|---|---|")
    total_err = total_words = 0.0
    for rel, ref in REFERENCES.items():
        t, _ = run(model, media / rel, **MODES[DEFAULT])
        w = wer(ref, t.text)
        total_err += w * len(normalise(ref))
        total_words += len(normalise(ref))
        print(f"| {Path(rel).name} | {w:.3f} | {t.text} |")
    print(f"| all (word-weighted) | {total_err / total_words:.3f} | |\n")

    print("## Word timestamps")
    jfk, _ = run(model, media / "audio/jfk.flac", **MODES[DEFAULT])
    americans = next(w for s in jfk.segments for w in s.words if w.text.lower().startswith("americans"))
    print(f"jfk.flac 'Americans' starts at {americans.start:.2f} s (target 1.8 ± 0.3 s): "
          f"{'ok' if abs(americans.start - 1.8) <= 0.3 else 'MISS'}")
    manifesto, _ = run(model, media / "video/manifesto.mp4", **MODES[DEFAULT])
    cues = read_srt((media / "groundtruth/manifesto.srt").read_text(encoding="utf-8"))
    agree = caption_agreement(cues, [(s.start, s.end, s.text) for s in manifesto.segments])
    print(f"manifesto.mp4: {agree:.1%} of {len(cues)} caption cues overlap a segment with their words "
          f"(target ≥ 80%): {'ok' if agree >= 0.8 else 'MISS'}\n")
    if args.skip_speed:
        return

    files = sorted(p for d in ("video", "audio") for p in (media / d).iterdir() if p.is_file())
    print(f"## Real-time factor over {len(files)} files in video/ and audio/ (audio decoding included)")
    print("| mode | audio s | speech s (VAD) | wall s | × real time |\n|---|---|---|---|---|")
    per_file: dict[str, dict[str, float]] = {}
    for name, mode in MODES.items():
        audio = speech = wall = 0.0
        for path in files:
            try:
                t, secs = run(model, path, **mode)
            except Exception as exc:  # a file without audio: counted as zero audio
                if "audio" not in str(exc):
                    raise
                continue
            audio += t.duration
            speech += t.speech_seconds
            wall += secs
            per_file.setdefault(str(path.relative_to(media)), {})[name] = secs
        print(f"| {name} | {audio:.0f} | {speech:.0f} | {wall:.1f} | {audio / wall:.1f} |", flush=True)

    print("\n## Batched vs sequential (both with VAD) on long speech")
    print("| file | batched s | sequential s | speed-up |\n|---|---|---|---|")
    for rel in LONG_SPEECH:
        times = per_file.get(rel, {})
        b, s = times.get("batched + VAD"), times.get(DEFAULT)
        if b and s:
            print(f"| {Path(rel).name} | {b:.1f} | {s:.1f} | {s / b:.2f}× |")
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
