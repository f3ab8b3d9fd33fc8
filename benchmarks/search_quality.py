"""Search quality over ../shared/media: recall@1, recall@5 and MRR@10 for dense, sparse and hybrid search.

Ingests the sample media into an index first when --index holds none (the real pipeline: whisper,
vision stages as configured, the default embedder), then runs every labelled query of
search_queries.yaml in each mode through the one searcher (mediaindex.search.searcher.Searcher, what the
CLI, the API and the agents call). A hit is relevant when its file is one of the query's files and
its time range overlaps the labelled one. Off-archive queries (kind off_archive) count as right when
they return no moment at all; they are left out of the recall table. For the first right speech
moment of the spoken queries whose label is at most 15 s long, the moment's length and how far its
start (and where it plays from) lies from the label's start; and search latency, p50 / p95.

With --reference the index is built instead from the reference transcripts that ship with the media
(captions, MANIFEST.md): search is measured without speech recognition errors, over the queries
whose files those transcripts cover.

With --from-index the index is built from another index's segments (the same speech, on-screen text
and labels) re-embedded by the configured embedder, so an embedder is measured without running speech
and vision again (e.g. MEDIAINDEX_EMBED__MODEL=embeddinggemma; shots keep no picture vectors there).

    python benchmarks/search_quality.py --index /path/to/bench-index --json quality.json
    python benchmarks/search_quality.py --index /path/to/ref-index --reference
    MEDIAINDEX_EMBED__MODEL=embeddinggemma python benchmarks/search_quality.py --index gemma-index --from-index bench-index
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import yaml

from mediaindex.config import load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.search.searcher import MODES, Searcher

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
    from mediaindex.service import IngestRequest, ingest

    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    began = time.perf_counter()
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [media / "audio", media / "video"]), index)
    print(f"ingested {len(report.indexed)} files in {time.perf_counter() - began:.0f} s")


def build_from_index(index_dir: Path, source: Path) -> None:
    """`source`'s segments re-embedded by the configured embedder into a new index at `index_dir`."""
    import shutil

    from embedders import read_segments

    shutil.rmtree(index_dir, ignore_errors=True)
    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    videos = read_segments(source)
    began = time.perf_counter()
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        for record, segs in videos:
            index.replace_video(record, segs, embedder.embed_passages([s.text for s in segs]))
    print(f"re-embedded {sum(len(s) for _, s in videos)} segments of {len(videos)} files with {embedder.name} "
          f"in {time.perf_counter() - began:.0f} s")


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
    parser.add_argument("--from-index", type=Path, default=None,
                        help="build --index from this index's segments, re-embedded by the configured embedder")
    args = parser.parse_args()

    queries = yaml.safe_load(args.queries.read_text(encoding="utf-8"))
    if args.reference:
        covered = build_reference_index(args.index)
        queries = [q for q in queries if set(q["files"]) & covered and q["kind"] not in {"ocr", "visual"}]
    elif args.from_index is not None:
        if not (args.index / "schema.json").exists():
            build_from_index(args.index, args.from_index)
    else:
        ensure_index(args.index, args.media)
    settings = load_settings(index_dir=args.index)
    embedder = load_text_embedder(settings.embed)
    ranks: dict[str, dict[str, list]] = {m: defaultdict(list) for m in MODES}
    off: dict[str, list[bool]] = defaultdict(list)  # per mode: did an off-archive query return nothing?
    lengths, offsets, seeks, took = [], [], [], []
    bands: dict[str, int] = defaultdict(int)
    returned: list[bool] = []  # each moment hybrid search returned for a labelled query: is it a right one?
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        searcher = Searcher(index, embedder, settings.vision)
        searcher.text("warm-up")
        for q in queries:
            for mode in MODES:
                began = time.perf_counter()
                hits = searcher.text(q["query"], limit=10, mode=mode)
                if mode == "hybrid":
                    took.append(time.perf_counter() - began)
                    for h in hits:
                        bands[f"{q['kind'] == 'off_archive' and 'off' or 'labelled'}:{h.band}"] += 1
                if q["kind"] == "off_archive":
                    off[mode].append(not hits)
                    if args.show_misses and mode == "hybrid" and hits:
                        print(f"  off-archive {q['query']!r} -> {len(hits)} hits, first "
                              f"{(Path(hits[0].source).name, hits[0].modality, hits[0].band, hits[0].text[:50])}")
                    continue
                r = rank_of(hits, q)
                if mode == "hybrid":
                    returned += [relevant(h, q) for h in hits]
                ranks[mode][q["kind"]].append(r)
                ranks[mode]["all"].append(r)
                if mode == "hybrid" and q["kind"] not in ("ocr", "visual") and r is not None:
                    right = hits[r - 1]
                    if right.modality == "speech" and q["end"] - q["start"] <= 15:
                        lengths.append(right.end - right.start)
                        offsets.append(abs(right.start - q["start"]))
                        seeks.append(abs((right.seek if right.seek is not None else right.start) - q["start"]))
                if args.show_misses and mode == "hybrid" and r != 1:
                    top = hits[0] if hits else None
                    print(f"  hybrid rank {r}: {q['query']!r} -> "
                          f"{(Path(top.source).name, round(top.start, 1), top.modality, top.text[:50]) if top else None}")
    queries = [q for q in queries if q["kind"] != "off_archive"]
    kinds = ["all", *dict.fromkeys(q["kind"] for q in queries)]
    table = {m: {k: summarise(ranks[m][k]) for k in kinds} for m in MODES}
    print("| mode | kind | queries | recall@1 | recall@5 | MRR@10 |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        for m in MODES:
            s = table[m][kind]
            print(f"| {m} | {kind} | {s['queries']} | {s['recall@1']:.2f} | {s['recall@5']:.2f} | {s['mrr@10']:.2f} |")
    print()
    for mode in MODES:
        if off[mode]:
            print(f"off-archive queries returning no moment, {mode}: {sum(off[mode])}/{len(off[mode])} "
                  f"= {sum(off[mode]) / len(off[mode]):.2f}")
    moments = {}
    if lengths:
        moments = {"queries": len(lengths), "median_length_s": statistics.median(lengths),
                   "median_start_offset_s": statistics.median(offsets), "max_start_offset_s": max(offsets),
                   "within_2s": sum(o <= 2 for o in offsets) / len(offsets),
                   "median_seek_offset_s": statistics.median(seeks)}
        print("first right speech moment (labels <= 15 s): " + ", ".join(
            f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in moments.items()))
    took_ms = sorted(t * 1000 for t in took)
    latency = {"p50_ms": took_ms[len(took_ms) // 2], "p95_ms": took_ms[int(0.95 * (len(took_ms) - 1))]}
    print(f"hybrid search latency over {len(took_ms)} queries: p50 {latency['p50_ms']:.1f} ms, "
          f"p95 {latency['p95_ms']:.1f} ms")
    print("bands of returned hits: " + ", ".join(f"{k} {v}" for k, v in sorted(bands.items())))
    # Labels name one place per query, so a right moment elsewhere counts as wrong: a lower bound.
    precision = sum(returned) / len(returned) if returned else 0.0
    print(f"moments returned for labelled queries (hybrid): {len(returned)}, at a labelled place: "
          f"{sum(returned)} = {precision:.2f}")
    if args.json:
        out = {"recall": table, "off_archive_empty": {m: sum(v) / len(v) for m, v in off.items() if v},
               "moments": moments, "latency": latency, "bands": bands,
               "precision": {"returned": len(returned), "right": sum(returned)}}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
