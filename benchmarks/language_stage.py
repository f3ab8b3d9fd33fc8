"""The language stage's cost (ingest.summaries): seconds of summarising per minute of media.

    python benchmarks/language_stage.py [FILE ...] [--json OUT]

Each file goes through decode, speech and vision once (in this process, not timed), then through the language
stage (`mediaindex.pipeline.stages.summary.SummaryStage`: the configured language model in the serving engine,
the default `llm` settings). Reported per file: media length, seconds in the language stage, map windows,
generated tokens, chapters and whether their sentences were generated or extractive; and in total, seconds of
language stage per minute of media. Model loading is timed apart.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mediaindex.config import load_settings  # noqa: E402


def _default_files() -> list[Path]:
    """The sample videos with speech, from shared/media/video beside the checkout or above it."""
    names = ["manifesto.mp4", "auto-editor_example.mp4", "issue-195-aspect-ratio.mp4", "issue-134-rotate.mp4"]
    for parent in REPO.parents:
        folder = parent / "shared" / "media" / "video"
        if folder.is_dir():
            return [folder / n for n in names]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="*")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    files = args.files or _default_files()
    if not files or not all(f.is_file() for f in files):
        parser.error(f"media files not found: {[str(f) for f in files if not f.is_file()] or 'none given'}")

    from mediaindex.agents.stored import CHAPTER, SUMMARY
    from mediaindex.pipeline.stages.decode import DecodeStage
    from mediaindex.pipeline.stages.speech import SpeechStage
    from mediaindex.pipeline.stages.summary import SummaryStage
    from mediaindex.pipeline.stages.vision import VisionStage

    work = Path(tempfile.mkdtemp(prefix="mi-lang-"))
    settings = load_settings("cpu", index_dir=work / "index", ingest={"summaries": True})
    before = [DecodeStage(settings), SpeechStage(settings), VisionStage(settings)]
    items = []
    for f in files:
        item = str(f.resolve())
        for stage in before:
            item = stage.process(item)
        items.append(item)
    start = time.perf_counter()
    stage = SummaryStage(settings)
    load = time.perf_counter() - start

    rows = []
    for item in items:
        start = time.perf_counter()
        item = stage.process(item)
        seconds = time.perf_counter() - start
        summary = next((s for s in item.segments if s.modality == SUMMARY), None)
        data = summary.extra[SUMMARY] if summary else {}
        tokens = next((n.split(" windows, ")[1].split()[0] for n in data.get("notes", []) if " windows, " in n), "0")
        chapters = [s for s in item.segments if s.modality == CHAPTER]
        rows.append({
            "file": Path(item.source).name, "media_s": round(item.info.duration, 1), "stage_s": round(seconds, 1),
            "status": data.get("status", "none"), "windows": data.get("windows", 0), "generated_tokens": int(tokens),
            "chapters": len(chapters), "generated_chapters": sum(c.extra[CHAPTER]["generated"] for c in chapters),
        })
        print(json.dumps(rows[-1]), flush=True)
    media = sum(r["media_s"] for r in rows)
    total = sum(r["stage_s"] for r in rows)
    results = {
        "machine": f"{platform.machine()}, no GPU", "model": settings.llm.model, "model_load_s": round(load, 1),
        "files": rows, "media_s": round(media, 1), "stage_s": round(total, 1),
        "stage_s_per_media_min": round(total / (media / 60), 1),
        "tokens_per_s": round(sum(r["generated_tokens"] for r in rows) / total, 1) if total else 0.0,
    }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
