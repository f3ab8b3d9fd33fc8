"""Speech lost where two recordings meet: each pair of sample clips joined by a pause, transcribed as one.

    python benchmarks/speech_joined.py [--json OUT]

A pair "loses words" when more than a fifth of the words the two clips give alone (transcribed one by one) are
missing from the joined transcript. The clips: short English reads (LJ Speech, "one two three"), Kennedy, a
LibriSpeech reader, French from ../shared/media; two quiet FLEURS recordings (English, German) from
../shared/media-val. Pairs after a short clip are all run; of the others a fixed third (by a checksum of their
names). Whisper base as `mediaindex` runs it (`SpeechModel.transcribe`). For an A/B, run this file from each
checkout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
import zlib
from pathlib import Path

import numpy as np

from mediaindex.config import SpeechSettings, default_cache_dir
from mediaindex.media.decode import decode_audio
from mediaindex.models.speech import SpeechModel

SHARED = Path(__file__).resolve().parents[2] / "shared"
CLIPS = {
    "lj20": "media/audio/LJ002-0020.wav", "lj35": "media/audio/LJ002-0035.wav", "eng": "media/audio/english.wav",
    "jfk": "media/audio/jfk_16k_mono.wav", "libri": "media/audio/2412-153948-0000.flac",
    "fr": "media/audio/french.aiff", "cab": "media-val/audio/en_cabbage_juice.ogg",
    "hosp": "media-val/audio/en_hospital_isolation.ogg", "trex": "media-val/audio/de_trex.ogg",
}
SHORT = ("lj20", "lj35", "eng")
PAUSES = (0.5, 1.5, 4.0)


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = SpeechModel(SpeechSettings(), default_cache_dir())
    audio = {name: decode_audio(str(args.shared / rel)) for name, rel in CLIPS.items()}
    alone = {name: words(" ".join(s.text for s in model.transcribe(a).segments)) for name, a in audio.items()}
    began, runs, lost = time.perf_counter(), 0, []
    for (first, second), pause in itertools.product(itertools.permutations(CLIPS, 2), PAUSES):
        if first not in SHORT and zlib.crc32(f"{first}{second}{pause}".encode()) % 3:
            continue
        runs += 1
        joined = np.concatenate([audio[first], np.zeros(int(pause * 16_000), np.float32), audio[second]])
        got = words(" ".join(s.text for s in model.transcribe(joined).segments))
        want = alone[first] + alone[second]
        missing = len(want) - sum(min(got.count(w), want.count(w)) for w in set(want))
        if missing > max(1, len(want) // 5):
            lost.append({"pair": f"{first} + {pause} s + {second}", "missing": missing, "of": len(want),
                         "heard": " ".join(got)})
            print(f"{first} + {pause} s + {second}: {missing}/{len(want)} words missing: {' '.join(got)[:100]}")
    print(f"{len(lost)} of {runs} joined pairs lose words ({time.perf_counter() - began:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "lost": lost}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
