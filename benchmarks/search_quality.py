"""Search quality over a labelled set: the product at each min_confidence beside a plain baseline.

--set media: ../shared/media with every benchmarks/search_queries*.yaml; --set media-val:
../shared/media-val with its queries.yaml and offarchive.yaml (never used to fit or choose anything).
Ingests the set's media into an index first when --index holds none (the real pipeline: whisper,
vision stages as configured, the default embedder), then runs every query through the one searcher
(mediaindex.search.searcher, what the CLI, the API and the agents call) at each min_confidence, and
through a plain baseline: the same dense + sparse candidates fused by the engine, merged into moments,
no threshold and no relevance model. A hit is right when its file answers the query and its time range
overlaps the labelled one. Reported: the right moment in the top 5 and at rank 1, by kind; the share
of off-archive queries (and of the near misses among them) that return nothing; search latency.
--relevance-model reads another fitted model file (e.g. one fitted on the other set).

With --reference the index is built instead from the reference transcripts that ship with the media
(captions, MANIFEST.md): search is measured without speech recognition errors, over the queries
whose files those transcripts cover.

With --from-index the index is built from another index's segments (the same speech, on-screen text
and labels) re-embedded by the configured embedder, so an embedder is measured without running speech
and vision again (e.g. MEDIAINDEX_EMBED__MODEL=embeddinggemma; shots keep no picture vectors there).

    python benchmarks/search_quality.py --set media-val --index /path/to/val-index --json quality.json
    python benchmarks/search_quality.py --index /path/to/ref-index --reference
    MEDIAINDEX_EMBED__MODEL=embeddinggemma python benchmarks/search_quality.py --index gemma-index --from-index bench-index
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from search_sets import SETS, Labelled, load_set, picture_clips, rank_of, relevant

from mediaindex.config import load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.search import relevance
from mediaindex.search.moments import merge_moments
from mediaindex.search.ranking import candidates, prepare
from mediaindex.search.searcher import search
from mediaindex.segments import Hit

HERE = Path(__file__).resolve().parent
LEVELS = tuple(relevance.LEVELS)


def ensure_index(index_dir: Path, media: Path) -> None:
    if (index_dir / "schema.json").exists():
        return
    from mediaindex.service import IngestRequest, ingest

    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    began = time.perf_counter()
    folders = [media / "audio", media / "video"]
    if (media / "images").is_dir():  # the pictures, as short clips beside the index
        pictures = index_dir.with_name(index_dir.name + "-pictures")
        picture_clips(media, pictures)
        folders.append(pictures)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, folders), index)
    print(f"ingested {len(report.indexed)} files in {time.perf_counter() - began:.0f} s")


def build_from_index(index_dir: Path, source: Path) -> None:
    """`source`'s segments re-embedded by the configured embedder into a new index at `index_dir`."""
    import shutil

    from embedders import read_segments

    from mediaindex.models.label_space import LabelSpace, segment_vectors

    shutil.rmtree(index_dir, ignore_errors=True)
    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    videos = read_segments(source)
    began = time.perf_counter()
    space = LabelSpace(embedder, settings.cache_dir)
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        for record, segs in videos:
            index.replace_video(record, segs, segment_vectors(embedder, segs, space))
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


def baseline(index: MediaIndex, embedder, query: str, limit: int) -> list[Hit]:
    """The plain search: dense + sparse candidates fused by the engine, merged into moments, no threshold."""
    q = prepare(index, embedder, query, "hybrid")
    found = [s.hit for s in candidates(index, q, None, "hybrid", index.settings.candidates)]
    cfg = index.settings
    return merge_moments(found, cfg.merge_gap, cfg.max_moment)[:limit]


def recall(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"queries": len(ranks), "top5": sum(r is not None and r <= 5 for r in ranks) / n,
            "rank1": sum(r == 1 for r in ranks) / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="media")
    parser.add_argument("--index", type=Path, required=True, help="index directory (ingested first if empty)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--relevance-model", type=Path, default=None, help="another fitted relevance model file")
    parser.add_argument("--reference", action="store_true", help="index the reference transcripts, not the media")
    parser.add_argument("--from-index", type=Path, default=None,
                        help="build --index from this index's segments, re-embedded by the configured embedder")
    args = parser.parse_args()

    queries: list[Labelled] = load_set(args.set)
    if args.reference:
        covered = build_reference_index(args.index)
        queries = [q for q in queries if set(q.files) & covered and q.family() not in {"ocr", "visual"}]
    elif args.from_index is not None:
        if not (args.index / "schema.json").exists():
            build_from_index(args.index, args.from_index)
    else:
        ensure_index(args.index, SETS[args.set])
    settings = load_settings(index_dir=args.index)
    embedder = load_text_embedder(settings.embed)
    if args.relevance_model is not None:
        relevance.MODEL_FILES[embedder.name] = args.relevance_model
    systems = ["baseline", *LEVELS]
    ranks: dict[str, dict[str, list]] = {m: defaultdict(list) for m in systems}
    empty: dict[str, dict[str, list[bool]]] = {m: defaultdict(list) for m in systems}
    took: list[float] = []
    returned: list[bool] = []
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        search(index, embedder, "warm-up")
        for q in queries:
            for system in systems:
                began = time.perf_counter()
                hits = (baseline(index, embedder, q.query, 10) if system == "baseline"
                        else search(index, embedder, q.query, 10, min_confidence=system))
                if system == relevance.DEFAULT_LEVEL:
                    took.append(time.perf_counter() - began)
                if q.off_archive:
                    empty[system]["all"].append(not hits)
                    if q.near_miss:
                        empty[system]["near miss"].append(not hits)
                    if args.show_misses and system == relevance.DEFAULT_LEVEL and hits:
                        print(f"  off-archive {q.query!r} -> {len(hits)}, first {Path(hits[0].source).name} "
                              f"{hits[0].modality} p={hits[0].score:.2f} {hits[0].text[:50]!r}")
                    continue
                r = rank_of(hits, q)
                if system == relevance.DEFAULT_LEVEL:
                    returned += [relevant(h, q) for h in hits]
                    if args.show_misses and r != 1:
                        top = hits[0] if hits else None
                        print(f"  rank {r}: {q.kind} {q.query!r} -> " + (
                            f"{Path(top.source).name} {top.start:.1f} {top.modality} p={top.score:.2f} "
                            f"{top.text[:50]!r}" if top else "nothing"))
                for key in ("all", q.family(), f"kind:{q.kind}"):
                    ranks[system][key].append(r)
    keys = ["all", *sorted(k for k in ranks["baseline"] if k != "all" and not k.startswith("kind:")),
            *sorted(k for k in ranks["baseline"] if k.startswith("kind:"))]
    table = {m: {k: recall(ranks[m][k]) for k in keys} for m in systems}
    print(f"set {args.set}, embedder {embedder.name}, relevance model "
          f"{relevance.model_file(embedder.name).name}")
    print("| queries | n | " + " | ".join(f"{m} top5 / rank1" for m in systems) + " |")
    print("|---|---|" + "---|" * len(systems))
    for k in keys:
        print(f"| {k} | {table['baseline'][k]['queries']} | " + " | ".join(
            f"{table[m][k]['top5']:.2f} / {table[m][k]['rank1']:.2f}" for m in systems) + " |")
    offs = {m: {k: sum(v) / len(v) for k, v in empty[m].items() if v} for m in systems}
    for k in ("all", "near miss"):
        n = len(empty["baseline"][k])
        if n:
            print(f"| off-archive returning nothing: {k} | {n} | " + " | ".join(
                f"{sum(empty[m][k])}/{n}" for m in systems) + " |")
    took_ms = sorted(t * 1000 for t in took)
    latency = {"p50_ms": took_ms[len(took_ms) // 2], "p95_ms": took_ms[int(0.95 * (len(took_ms) - 1))]}
    print(f"search latency ({relevance.DEFAULT_LEVEL}) over {len(took_ms)} queries: p50 {latency['p50_ms']:.1f} ms, "
          f"p95 {latency['p95_ms']:.1f} ms")
    precision = sum(returned) / len(returned) if returned else 0.0
    print(f"moments returned at {relevance.DEFAULT_LEVEL} for labelled queries: {len(returned)}, at a labelled "
          f"place: {sum(returned)} = {precision:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"set": args.set, "recall": table, "off_archive_empty": offs,
                                         "latency": latency, "precision": precision}, indent=2))


if __name__ == "__main__":
    main()
