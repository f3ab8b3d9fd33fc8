"""Search quality over ../shared/media: recall@1, recall@5 and MRR@10 for dense, sparse and hybrid search.

Ingests the sample media into an index first when --index holds none (the real pipeline: whisper,
vision stages as configured, the default embedder), then runs every labelled query of
search_queries.yaml in each mode. A hit is relevant when its file is one of the query's files and
its time range overlaps the labelled one.

With --reference the index is built instead from the reference transcripts that ship with the media
(captions, MANIFEST.md): search is measured without speech recognition errors, over the queries
whose files those transcripts cover.

    python benchmarks/search_quality.py --index /path/to/bench-index --json quality.json
    python benchmarks/search_quality.py --index /path/to/ref-index --reference
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import yaml

from mediaindex.config import load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.index.search import MODES, search
from mediaindex.models.text_embed import load_text_embedder

HERE = Path(__file__).resolve().parent
MEDIA = HERE.parent.parent / "shared" / "media"


def relevant(hit, q: dict) -> bool:
    return Path(hit.source).name in q["files"] and hit.start < q["end"] and hit.end > q["start"]


def rank_of(hits, q: dict) -> int | None:
    return next((i + 1 for i, h in enumerate(hits) if relevant(h, q)), None)


def summarise(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"recall@1": sum(r == 1 for r in ranks) / n, "recall@5": sum(r is not None and r <= 5 for r in ranks) / n,
            "mrr@10": sum(1 / r for r in ranks if r is not None and r <= 10) / n, "queries": len(ranks)}


def ensure_index(index_dir: Path, media: Path) -> None:
    if (index_dir / "schema.json").exists():
        return
    from mediaindex.ingest.run import IngestRequest, ingest

    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    began = time.perf_counter()
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [media / "audio", media / "video"]), index)
    print(f"ingested {len(report.indexed)} files in {time.perf_counter() - began:.0f} s")


def build_reference_index(index_dir: Path) -> set[str]:
    """An index of the reference transcripts; returns the file names it covers."""
    import shutil

    from mediaindex.index.catalog import VideoRecord
    from tests.corpus import corpus

    shutil.rmtree(index_dir, ignore_errors=True)
    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    covered = set()
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        for vid, segs in corpus().items():
            record = VideoRecord(vid, segs[0].source, vid, 1, 1, None, "en", len(segs), {}, 0.0)
            index.replace_video(record, segs, embedder.embed_passages([s.text for s in segs]))
            covered.add(Path(segs[0].source).name)
    return covered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="index directory (ingested first if empty)")
    parser.add_argument("--media", type=Path, default=MEDIA)
    parser.add_argument("--queries", type=Path, default=HERE / "search_queries.yaml")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--reference", action="store_true", help="index the reference transcripts, not the media")
    args = parser.parse_args()

    queries = yaml.safe_load(args.queries.read_text(encoding="utf-8"))
    if args.reference:
        covered = build_reference_index(args.index)
        queries = [q for q in queries if set(q["files"]) & covered and q["kind"] not in {"ocr", "visual"}]
    else:
        ensure_index(args.index, args.media)
    settings = load_settings(index_dir=args.index)
    embedder = load_text_embedder(settings.embed)
    ranks: dict[str, dict[str, list]] = {m: defaultdict(list) for m in MODES}
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        for q in queries:
            for mode in MODES:
                hits = search(index, embedder, q["query"], limit=10, mode=mode)
                r = rank_of(hits, q)
                ranks[mode][q["kind"]].append(r)
                ranks[mode]["all"].append(r)
                if args.show_misses and mode == "hybrid" and r != 1:
                    top = hits[0] if hits else None
                    print(f"  hybrid rank {r}: {q['query']!r} -> "
                          f"{(Path(top.source).name, round(top.start, 1), top.text[:50]) if top else None}")
    kinds = ["all", *dict.fromkeys(q["kind"] for q in queries)]
    table = {m: {k: summarise(ranks[m][k]) for k in kinds} for m in MODES}
    print("| mode | kind | queries | recall@1 | recall@5 | MRR@10 |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        for m in MODES:
            s = table[m][kind]
            print(f"| {m} | {kind} | {s['queries']} | {s['recall@1']:.2f} | {s['recall@5']:.2f} | {s['mrr@10']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
