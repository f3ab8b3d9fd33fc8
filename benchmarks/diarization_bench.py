"""Who speaks when: diarization error rate and speaker counts on mixes built from the real clips.

    python benchmarks/diarization_bench.py [--media DIR] [--threshold 0.3] [--threads 1]

Each mix concatenates real recordings from ../shared/media (different people, or one person twice) with
short pauses between them, so every turn boundary and speaker is known; stereo_diarization.wav's two
channels (one speaker each) give a two-speaker mix. The reference speech of each clip is where Silero VAD
hears speech in that clip alone, in the silence around it in the mix (no human labels exist); DER = (missed + false alarm + confusion) /
reference speech on a 10 ms grid, after the best one-to-one mapping of found to true speakers, with no
collar and with the usual 0.25 s collar around reference boundaries. Cost: CPU seconds of the speaker
pass (embeddings + clustering) and of Whisper on the same audio, as real-time factors (audio seconds per
CPU second; wall time too, which on a shared machine says more about the neighbours).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mediaindex.config import SpeechSettings  # noqa: E402
from mediaindex.media.decode import decode_audio  # noqa: E402
from mediaindex.media.ffmpeg_bin import ffmpeg_exe  # noqa: E402
from mediaindex.models.speakers import SpeakerEncoder, SpeakerTrack, Turn  # noqa: E402
from mediaindex.models.speech import SpeechModel, speech_regions  # noqa: E402

SR = 16_000
PAUSE = 0.6  # seconds of silence between two clips of a mix

# (clip, who speaks): clips of the same person share a name.
CLIPS = {
    "jfk": ("audio/jfk.flac", None, "kennedy"),
    "libri": ("audio/2412-153948-0000.flac", None, "librispeech-2412"),
    "lj20": ("audio/LJ002-0020.wav", None, "lj"),
    "lj35": ("audio/LJ002-0035.wav", None, "lj"),
    "one-two-three": ("audio/english.wav", None, "uberi-en"),
    "french": ("audio/french.aiff", None, "uberi-fr"),
    "hotwords": ("audio/hotwords.mp3", None, "hotwords"),
    "left": ("audio/stereo_diarization.wav", "FL", "stereo-left"),
    "right": ("audio/stereo_diarization.wav", "FR", "stereo-right"),
    "manifesto-a": ("video/manifesto.mp4", (5.0, 25.0), "librivox-reader"),
    "manifesto-b": ("video/manifesto.mp4", (40.0, 60.0), "librivox-reader"),
    "manifesto-long": ("video/manifesto.mp4", (0.0, 88.0), "librivox-reader"),
    "auto-editor": ("video/auto-editor_example.mp4", (0.0, 17.5), "auto-editor"),
}
MIXES = {
    "stereo channels L+R": ["left", "right"],
    "kennedy + librispeech": ["jfk", "libri"],
    "kennedy, one-two-three, kennedy": ["jfk", "one-two-three", "jfk"],
    "librispeech, LJ, kennedy, LJ": ["libri", "lj20", "jfk", "lj35"],
    "manifesto, kennedy, manifesto": ["manifesto-a", "jfk", "manifesto-b"],
    "auto-editor + librispeech": ["auto-editor", "libri"],
    "hotwords, kennedy, french": ["hotwords", "jfk", "french"],
    "stereo L, kennedy, stereo R, librispeech": ["left", "jfk", "right", "libri"],
    "single: manifesto 88 s": ["manifesto-long"],
    "single: kennedy": ["jfk"],
    "single: LJ twice": ["lj20", "lj35"],
    "single: librispeech": ["libri"],
}


def load_clip(media: Path, rel: str, part: str | tuple[float, float] | None) -> np.ndarray:
    if isinstance(part, str):  # one channel of a stereo file
        raw = subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media / rel), "-af", f"pan=mono|c0={part}",
                              "-ar", str(SR), "-f", "f32le", "-"], capture_output=True, check=True).stdout
        return np.frombuffer(raw, dtype=np.float32).copy()
    audio = decode_audio(media / rel)
    if part is not None:
        audio = audio[int(part[0] * SR) : int(part[1] * SR)]
    return audio


@dataclass
class Mix:
    audio: np.ndarray
    reference: list[Turn]  # speech of each clip, by its true speaker

    @property
    def speakers(self) -> int:
        return len({t.speaker for t in self.reference})


def build(media: Path, names: list[str]) -> Mix:
    pieces, reference, at = [], [], 0
    pause = np.zeros(int(PAUSE * SR), dtype=np.float32)
    for name in names:
        rel, part, who = CLIPS[name]
        clip = load_clip(media, rel, part)
        # The clip in the silence it has in the mix (none before the first): the VAD pads each region by
        # 100 ms, and a pad cut off at the clip's own edge would count the mix's pad as false speech.
        before = pause if at else pause[:0]
        for a, b in speech_regions(np.concatenate([before, clip, pause])):
            reference.append(Turn((at + a - len(before)) / SR, (at + b - len(before)) / SR, who))
        pieces += [clip, pause]
        at += len(clip) + len(pause)
    return Mix(np.concatenate(pieces), reference)


def _grid(turns: list[Turn], n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for t in turns:
        mask = out.setdefault(t.speaker, np.zeros(n, dtype=bool))
        mask[int(t.start * 100) : int(np.ceil(t.end * 100))] = True
    return out


def der(reference: list[Turn], found: list[Turn], duration: float, collar: float = 0.0) -> float:
    from scipy.optimize import linear_sum_assignment

    n = int(np.ceil(duration * 100)) + 1
    ref, hyp = _grid(reference, n), _grid(found, n)
    scored = np.ones(n, dtype=bool)
    for t in reference:  # no scoring within the collar around each reference boundary
        for edge in (t.start, t.end):
            scored[max(0, int((edge - collar) * 100)) : int((edge + collar) * 100)] = False
    rnames, hnames = list(ref), list(hyp)
    overlap = np.array([[np.sum(ref[r] & hyp[h] & scored) for h in hnames] for r in rnames]) if hnames else None
    rows, cols = linear_sum_assignment(-overlap) if overlap is not None else ([], [])
    mapping = {hnames[c]: rnames[r] for r, c in zip(rows, cols, strict=True)}
    ref_any = np.any(list(ref.values()), axis=0) & scored
    hyp_any = np.any(list(hyp.values()), axis=0) & scored if hyp else np.zeros(n, dtype=bool)
    missed = np.sum(ref_any & ~hyp_any)
    false_alarm = np.sum(hyp_any & ~ref_any)
    correct = np.zeros(n, dtype=bool)
    for h, r in mapping.items():
        correct |= hyp[h] & ref[r]
    confusion = np.sum(ref_any & hyp_any & ~(correct & scored))
    return float((missed + false_alarm + confusion) / max(1, np.sum(ref_any)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[1]
    parser.add_argument("--media", type=Path, default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", repo.parent / "shared" / "media")))
    parser.add_argument("--threshold", type=float, default=SpeechSettings().speaker_threshold)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mediaindex")
    parser.add_argument("--skip-whisper", action="store_true", help="Speaker pass only (no Whisper cost column).")
    args = parser.parse_args()
    media = args.media.resolve()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average at start {os.getloadavg()[0]:.1f}; threshold {args.threshold}, {args.threads} thread(s)\n")
    encoder = SpeakerEncoder("cpu", threads=args.threads)
    encoder.windows(np.random.default_rng(0).standard_normal(SR * 2).astype(np.float32) * 0.1)  # JIT warm-up
    whisper = None if args.skip_whisper else SpeechModel(SpeechSettings(cpu_threads=args.threads), args.cache)

    print("| mix | audio s | speakers (true / found) | DER | DER, 0.25 s collar | speaker pass × real time (CPU) |"
          " Whisper × real time (CPU) |\n|---|---|---|---|---|---|---|")
    ders, collared, right, total_audio, spk_cpu, asr_cpu, spk_wall = [], [], 0, 0.0, 0.0, 0.0, 0.0
    for name, clips in MIXES.items():
        mix = build(media, clips)
        duration = len(mix.audio) / SR
        track = SpeakerTrack(encoder)
        wall, cpu = time.perf_counter(), time.process_time()
        track.add(mix.audio, 0.0, speech_regions(mix.audio))
        found = track.turns(None, args.threshold)
        spk = time.process_time() - cpu
        spk_wall += time.perf_counter() - wall
        asr = float("nan")
        if whisper is not None:
            cpu = time.process_time()
            whisper.transcribe(mix.audio)
            asr = time.process_time() - cpu
            asr_cpu += asr
        d, dc = der(mix.reference, found, duration), der(mix.reference, found, duration, collar=0.25)
        count = len({t.speaker for t in found})
        ders.append(d)
        collared.append(dc)
        right += count == mix.speakers
        total_audio += duration
        spk_cpu += spk
        print(f"| {name} | {duration:.1f} | {mix.speakers} / {count} | {d:.1%} | {dc:.1%} | {duration / spk:.0f} | "
              f"{duration / asr:.1f} |", flush=True)
    n = len(MIXES)
    print(f"\nmean DER {np.mean(ders):.1%} (0.25 s collar: {np.mean(collared):.1%}); speaker count right on "
          f"{right}/{n} mixes ({right / n:.0%}); speaker pass {total_audio / spk_cpu:.0f}× real time per CPU second "
          f"({total_audio / spk_wall:.0f}× by wall clock)"
          + (f", Whisper base {total_audio / asr_cpu:.1f}× per CPU second" if whisper is not None else ""))
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
