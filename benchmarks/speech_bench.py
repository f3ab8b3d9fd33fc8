"""Speech stage accuracy and speed on the shared media.

    python benchmarks/speech_bench.py [--media DIR] [--threads 2] [--skip-speed] [--compare-with REV]

Prints: WER of Whisper base on the reference clips, word-timestamp checks (jfk "Americans", caption
agreement on manifesto.mp4), and real-time factors (audio seconds per wall second, decoding
included) of the speech stage over every file in video/ and audio/: sequential + VAD (the default),
batched + VAD, and sequential without VAD; then batched vs sequential on the long speech files.
Languages: WER per language on multilingual.mp3 (English, then German), the languages its segments are
tagged with, and what one-language files cost (CPU seconds, encoder passes); with --compare-with REV the
same files through models/speech.py as it was at git revision REV (language detected once per file),
side by side in the same process.
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
# multilingual.mp3 reads the MIT license in English (to ~29.5 s), then a German translation of it. English:
# the license's text as read (without its parenthesised "(the "Software")"). German: no transcript ships
# with the file; this is the wording of the German translation it reads, where Whisper tiny (in
# faster-whisper's own tests) and base agree with it, so its WER is indicative, not exact.
MULTILINGUAL = {
    "en": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
          "associated documentation files, to deal in the software without restriction, including without "
          "limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies "
          "of the software, and to permit persons to whom the software is furnished to do so, subject to the "
          "following conditions: the above copyright notice and this permission notice shall be included in all "
          "copies or substantial portions of the software.",
    "de": "Jedem, der diese Software und die dazugehörigen Dokumentationsdateien erhält, wird hiermit unentgeltlich "
          "die Genehmigung erteilt, mit der Software uneingeschränkt zu verfahren. Dies umfasst insbesondere das "
          "Recht, die Software zu verwenden, zu vervielfältigen, zu modifizieren, zusammenzufügen, zu "
          "veröffentlichen, zu verteilen, unterzulizenzieren und/oder Kopien der Software zu verkaufen und diese "
          "Rechte unter den folgenden Bedingungen anderen zu übertragen.",
}
SWITCH = 29.5  # seconds: where the German reading starts
ONE_LANGUAGE = ["audio/jfk.flac", "audio/2412-153948-0000.flac", "video/manifesto.mp4",
                "video/auto-editor_example.mp4", "audio/apollo11.mp3", "video/issue-195-aspect-ratio.mp4"]
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


def model_at(rev: str, settings: SpeechSettings, cache: Path):
    """SpeechModel as models/speech.py was at git revision `rev`, loaded beside the current one."""
    import importlib.util
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{rev}:mediaindex/models/speech.py"], cwd=repo, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"speech_at_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"speech.py@{rev}", "exec"), module.__dict__)  # noqa: S102
    return module.SpeechModel(settings, cache)


def languages(model: SpeechModel, media: Path, compare: str | None, cache: Path) -> None:
    print("## Languages")
    t, _ = run(model, media / "audio/multilingual.mp3", **MODES[DEFAULT])
    print("multilingual.mp3, each half against its reference:\n")
    print("| half | tagged | WER | hypothesis |\n|---|---|---|---|")
    for lang, ref in MULTILINGUAL.items():
        segs = [s for s in t.segments if (s.start < SWITCH) == (lang == "en")]
        hyp = " ".join(s.text for s in segs)
        tags = sorted({str(s.language) for s in segs})
        print(f"| {lang} | {', '.join(tags)} | {wer(ref, hyp):.3f} | {hyp} |")
    print(f"\nlanguages (seconds of speech): "
          f"{ {k: round(v[0], 1) for k, v in t.language_seconds.items()} }, encoder passes {t.encoder_passes}\n")
    others = {}
    if compare:
        others[f"language once per file ({compare})"] = model_at(compare, model.settings, cache)
    print("One-language files: CPU seconds of transcription (process time; this machine is shared, CPU time "
          "is steadier than wall time)")
    header = "| file | audio s | per window: CPU s | encoder passes |" + "".join(f" {k}: CPU s |" for k in others)
    print(header + "\n|---|---|---|---|" + "---|" * len(others))
    totals = [0.0] * (1 + len(others))
    for rel in ONE_LANGUAGE:
        model.settings = model.settings.model_copy(update=MODES[DEFAULT])
        cpu = time.process_time()
        t = model.transcribe_stream(AudioStream(media / rel, chunk_seconds=model.settings.chunk_seconds))
        spent = [time.process_time() - cpu]
        for other in others.values():
            cpu = time.process_time()
            other.transcribe_stream(AudioStream(media / rel, chunk_seconds=model.settings.chunk_seconds))
            spent.append(time.process_time() - cpu)
        totals = [a + b for a, b in zip(totals, spent, strict=True)]
        print(f"| {Path(rel).name} | {t.duration:.0f} | {spent[0]:.1f} | {t.encoder_passes} |"
              + "".join(f" {x:.1f} |" for x in spent[1:]), flush=True)
    print("| all | | " + " | ".join([f"{totals[0]:.1f}", ""] + [f"{x:.1f}" for x in totals[1:]]) + " |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[1]
    parser.add_argument("--media", type=Path, default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", repo.parent / "shared" / "media")))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mediaindex")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--compare-with", metavar="REV", help="Also time models/speech.py of this git revision.")
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
    languages(model, media, args.compare_with, args.cache)
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
