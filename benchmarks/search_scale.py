"""Scale benchmark of the embedded store: synthetic segments (384-d text + sparse words + payload).

Measures upsert throughput, HNSW build time (`optimize`), p50/p95 search latency with and without
filters before and after the build, the whole searcher's (mediaindex.search.searcher.search: candidates
fused in the engine, judged, merged into moments), recall@10 of the built index against exact search,
disk size and peak RSS. Vectors are clustered (like real embeddings, unlike uniform noise) so recall means something.

    python benchmarks/search_scale.py --points 10000 100000 --json scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from mediaindex.index.edge_store import EdgeStore
from mediaindex.index.filters import SearchFilters
from mediaindex.index.sparse import SparseEncoder
from mediaindex.index.store import SPARSE_VECTOR, TEXT_VECTOR, Retriever
from mediaindex.segments import Segment

DIM = 384


class SyntheticEmbedder:
    """Stands in for the text embedder: the synthetic queries' own vectors, and for any other text (class names,
    background passages, a query's words) a unit vector seeded by the text, so the searcher runs every step it runs
    on a real archive at no embedding cost."""

    name, dim = "synthetic", DIM

    def __init__(self, vector_of: dict[str, np.ndarray]) -> None:
        self.vector_of = vector_of

    def _seeded(self, text: str) -> np.ndarray:
        v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def embed_query(self, text: str) -> np.ndarray:
        return self.vector_of[text] if text in self.vector_of else self._seeded(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.array([self.embed_query(t) for t in texts], dtype=np.float32).reshape(len(texts), DIM)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.array([self._seeded(t) for t in texts], dtype=np.float32).reshape(len(texts), DIM)
MODALITIES = ["speech", "speech", "ocr", "visual"]
LANGUAGES = ["en", "en", "en", "de", "ko"]


def _vocabulary(rng: np.random.Generator, n: int = 20_000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(n)]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_batch(rng, start: int, n: int, centroids: np.ndarray, vocab: list[str], zipf: np.ndarray):
    ids = np.arange(start, start + n)
    vecs = _unit(centroids[rng.integers(0, len(centroids), n)] + 0.35 * rng.normal(size=(n, DIM)) / np.sqrt(DIM) * 4)
    segs = []
    all_words = rng.choice(len(vocab), size=(n, 20), p=zipf)
    lengths = rng.integers(4, 20, n)
    for row, i in enumerate(ids):
        video = int(i // 50)
        words = all_words[row, : lengths[row]]
        segs.append(Segment(
            video_id=f"v{video:07d}", source=f"/archive/d{video % 100:02d}/video{video:07d}.mp4",
            start=float(i % 50) * 4.0, end=float(i % 50) * 4.0 + 4.0, modality=MODALITIES[i % 4],
            text=" ".join(vocab[w] for w in words), language=LANGUAGES[i % 5],
        ))
    return segs, vecs


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def latencies(fn, queries) -> tuple[float, float]:
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


def exact_ids(store: EdgeStore, q: np.ndarray, flt: SearchFilters | None, k: int = 10) -> list:
    import qdrant_edge as qe

    req = qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist(), using=TEXT_VECTOR), filter=store._filter(flt),
                          params=qe.SearchParams(exact=True), with_payload=False)
    return [p.id for p in store._shard.query(req)]


def approx_ids(store: EdgeStore, q: np.ndarray, flt: SearchFilters | None, k: int = 10) -> list:
    import qdrant_edge as qe

    req = qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist(), using=TEXT_VECTOR), filter=store._filter(flt),
                          with_payload=False)
    return [p.id for p in store._shard.query(req)]


def run(points: int, queries: int, workdir: Path, optimize: bool, seed: int = 0, reuse: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    centroids = rng.normal(size=(max(100, points // 100), DIM))
    vocab = _vocabulary(rng)
    zipf = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    zipf /= zipf.sum()
    path = workdir / f"scale-{points}"
    encoder = SparseEncoder()
    result: dict = {"points": points}
    if reuse:  # search an index an earlier run built (same data; the queries are a fresh sample)
        if not path.is_dir():
            raise SystemExit(f"--reuse: no index at {path}")
        store = EdgeStore(path, {TEXT_VECTOR: DIM}, encoder)
        rng = np.random.default_rng(seed + 1)
    else:
        shutil.rmtree(path, ignore_errors=True)
        store = EdgeStore(path, {TEXT_VECTOR: DIM}, encoder)
        t0, written, batch = time.perf_counter(), 0, 5_000
        while written < points:
            n = min(batch, points - written)
            segs, vecs = make_batch(rng, written, n, centroids, vocab, zipf)
            store.upsert(segs, vecs)
            written += n
        result["upsert_s"] = time.perf_counter() - t0
        result["upsert_per_s"] = points / result["upsert_s"]

    qs = _unit(centroids[rng.integers(0, len(centroids), queries)] + 0.35 * rng.normal(size=(queries, DIM)) / np.sqrt(DIM) * 4)
    n_videos = points // 50
    filtered = [SearchFilters(modality="speech", language="en") for _ in range(queries)]
    by_video = [SearchFilters(video_id=f"v{int(v):07d}") for v in rng.integers(0, n_videos, queries)]
    by_dir = [SearchFilters(source_prefix=f"/archive/d{int(v):02d}/", start=20.0, end=100.0)
              for v in rng.integers(0, 100, queries)]
    texts = [" ".join(rng.choice(vocab[:5000], size=3)) for _ in range(queries)]
    words = [encoder.query(t) for t in texts]
    # The whole searcher (candidates fused in the engine, each judged, moments): the index as the
    # searcher sees it, and the synthetic query vectors standing in for the text embedder's.
    from types import SimpleNamespace

    from mediaindex.config import IndexSettings
    from mediaindex.search.searcher import Searcher, search

    vector_of = {t: qs[i] for i, t in enumerate(texts)}
    # No catalog here: an empty vocabulary (the synthetic words are lower case, so no query is respelt); no
    # classifier labelled the synthetic visual segments.
    view = SimpleNamespace(settings=IndexSettings(), store=store, sparse=encoder, vocabulary=frozenset,
                           classifier=None)
    embedder = SyntheticEmbedder(vector_of)

    def measure(tag: str) -> None:
        result[f"{tag}_p50_ms"], result[f"{tag}_p95_ms"] = latencies(
            lambda i: store.search(qs[i], 10), range(queries))
        result[f"{tag}_filtered_p50_ms"], result[f"{tag}_filtered_p95_ms"] = latencies(
            lambda i: store.search(qs[i], 10, filtered[i]), range(queries))
        result[f"{tag}_video_p50_ms"], result[f"{tag}_video_p95_ms"] = latencies(
            lambda i: store.search(qs[i], 10, by_video[i]), range(queries))
        result[f"{tag}_dir_time_p50_ms"], result[f"{tag}_dir_time_p95_ms"] = latencies(
            lambda i: store.search(qs[i], 10, by_dir[i]), range(queries))
        result[f"{tag}_hybrid_p50_ms"], result[f"{tag}_hybrid_p95_ms"] = latencies(
            lambda i: store.query([Retriever(TEXT_VECTOR, qs[i]), Retriever(SPARSE_VECTOR, words[i])], 10,
                                  filtered[i], candidates=100), range(queries))
        result[f"{tag}_searcher_p50_ms"], result[f"{tag}_searcher_p95_ms"] = latencies(
            lambda i: search(view, embedder, texts[i], limit=10), range(queries))
        # 50 moments: past the fitted pool of 100, so a second, deeper engine call judged by the pool's yardstick.
        result[f"{tag}_searcher50_p50_ms"], result[f"{tag}_searcher50_p95_ms"] = latencies(
            lambda i: search(view, embedder, texts[i], limit=50), range(queries))
        # Within one file: the filtered candidates, judged by the query's pool over the whole index.
        result[f"{tag}_searcher_video_p50_ms"], result[f"{tag}_searcher_video_p95_ms"] = latencies(
            lambda i: search(view, embedder, texts[i], limit=10, filters=by_video[i]), range(queries))
        # By file: the moments of one search FILE_DEPTH deep, grouped.
        result[f"{tag}_files_p50_ms"], result[f"{tag}_files_p95_ms"] = latencies(
            lambda i: Searcher(view, embedder).files(texts[i], 10), range(queries))  # type: ignore[arg-type]

    if not reuse:
        measure("exact")
    if reuse:
        measure("hnsw")
    elif optimize:
        t0 = time.perf_counter()
        store.optimize()
        result["optimize_s"] = time.perf_counter() - t0
        measure("hnsw")
    stats = store.stats()
    result["indexed_vectors"] = stats["indexed_vectors"]
    recalls = {}
    for tag, flts in (("recall10", [None] * queries), ("recall10_filtered", filtered)):
        hits = [len(set(approx_ids(store, qs[i], flts[i])) & set(exact_ids(store, qs[i], flts[i]))) / 10
                for i in range(min(queries, 100))]
        recalls[tag] = float(np.mean(hits))
    result.update(recalls)
    result["disk_mb"] = stats["disk_bytes"] / 1024**2
    result["rss_mb"] = rss_mb()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-optimize", action="store_true", help="measure exact search only")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true",
                        help="only search the index an earlier run left in --dir (after its optimize)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaindex-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.points:
        r = run(n, args.queries, workdir, optimize=not args.no_optimize, reuse=args.reuse)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
        results.append(r)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    print(f"cpus={os.cpu_count()} workdir={workdir}")


if __name__ == "__main__":
    main()
