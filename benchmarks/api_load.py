"""Load test of the HTTP API: p95 search latency at N concurrent clients against `mediaindex serve` on
loopback, over an index of the sample media plus synthetic segments. Bounded in requests and time.

    python benchmarks/api_load.py                       # builds benchmarks/out/api-index once, then runs
    python benchmarks/api_load.py --clients 20 --requests 2000 --max-seconds 120
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout
QUERIES = [
    "ask not what your country can do for you", "the history of class struggles", "banana",
    "an example video for your convenience", "Workers of the world, unite", "one two three",
    "Fragt nicht, was euer Land für euch tun kann", "미국 국민 여러분", "the press yard", "the horizon seems distant",
    "permission is hereby granted free of charge", "a confused complaint against the wizard",
    "Houston we have a problem", "the narrative would be tedious", "in eighteen thirteen", "what time is it",
]
WORDS = ["archive", "budget", "meeting", "river", "mountain", "speech", "lecture", "interview", "market", "weather", "football", "election", "music", "history", "science", "garden", "kitchen", "station", "harbour", "museum", "council", "school"]


def build_index(index_dir: Path, media: Path, synthetic: int) -> None:
    import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
    from mediaindex.config import load_settings
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from mediaindex.models.text_embed import load_text_embedder
    from mediaindex.segments import Segment
    from mediaindex.service import IngestRequest, ingest
    from mediaindex.workers.runtime import shutdown_ray

    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        t0 = time.perf_counter()
        report = ingest(IngestRequest(settings, [media]), index)
        shutdown_ray()
        print(f"ingested {len(report.indexed)} files in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        # Synthetic segments: random unit vectors cost a nearest-neighbour search exactly what real ones do.
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for start in range(0, synthetic, 5000):
            n = min(5000, synthetic - start)
            vectors = rng.standard_normal((n, embedder.dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            segments = []
            for i in range(start, start + n):
                video, k = divmod(i, 100)
                text = " ".join(rng.choice(WORDS, 8))
                segments.append(Segment(video_id=f"synthetic{video:07d}", source=f"/synthetic/{video:07d}.mp4",
                                        start=k * 5.0, end=k * 5.0 + 5.0, modality="speech", text=text, language="en"))
            index.store.upsert(segments, vectors)
            # Each synthetic file gets its catalog entry: points of files the catalog lacks are removed on open.
            for video in sorted({s.video_id for s in segments}):
                mine = [s for s in segments if s.video_id == video]
                index.catalog.upsert(VideoRecord(video, mine[0].source, video, 0, 0, None, "en", len(mine), {}, 0.0))
        print(f"added {synthetic} synthetic segments in {time.perf_counter() - t0:.0f} s; "
              f"{index.store.count()} in all", file=sys.stderr)
    (index_dir / "bench-built").write_text(json.dumps({"synthetic": synthetic}))


async def load(url: str, clients: int, requests: int, max_seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    issued = 0
    deadline = time.monotonic() + max_seconds

    async def client(n: int, http: httpx.AsyncClient) -> None:
        nonlocal issued
        while issued < requests and time.monotonic() < deadline:
            issued += 1
            q = QUERIES[(issued + n) % len(QUERIES)]
            t0 = time.perf_counter()
            try:
                r = await http.get(f"{url}/search", params={"q": q, "limit": 10})
                ok = r.status_code == 200 and isinstance(r.json().get("hits"), list)
                key = None if ok else str(r.status_code)
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            latencies.append(time.perf_counter() - t0)
            if key:
                errors[key] = errors.get(key, 0) + 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        for q in QUERIES:  # warm-up, not measured
            await http.get(f"{url}/search", params={"q": q})
        t0 = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        wall = time.perf_counter() - t0
    ms = sorted(x * 1000 for x in latencies)
    pct = lambda p: ms[min(len(ms) - 1, int(round(p / 100 * (len(ms) - 1))))]  # noqa: E731
    return {"clients": clients, "requests": len(ms), "errors": errors, "seconds": round(wall, 1),
            "per_second": round(len(ms) / wall, 1), "p50_ms": round(pct(50), 1), "p95_ms": round(pct(95), 1),
            "p99_ms": round(pct(99), 1), "max_ms": round(ms[-1], 1), "mean_ms": round(statistics.mean(ms), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, default=ROOT / "benchmarks" / "out" / "api-index")
    ap.add_argument("--media", type=Path, default=Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", ROOT.parent / "shared" / "media")))
    ap.add_argument("--synthetic", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--max-seconds", type=float, default=180)
    ap.add_argument("--port", type=int, default=8799)
    args = ap.parse_args()

    if not (args.index / "bench-built").exists():
        build_index(args.index.resolve(), args.media.resolve(), args.synthetic)
    env = {**os.environ, "MEDIAINDEX_API__RATE_LIMIT_PER_MINUTE": "0"}  # measure the search, not the limiter
    env.pop("RAY_AUTH_TOKEN", None)
    server = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--index", str(args.index),
                               "--port", str(args.port), "--media-root", str(args.media)], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{args.port}"
    try:
        import httpx

        for _ in range(240):
            try:
                if httpx.get(f"{url}/health/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        segments = httpx.get(f"{url}/health/ready").json()["checks"]["index"]
        result = asyncio.run(load(url, args.clients, args.requests, args.max_seconds))
    finally:
        server.terminate()
        server.wait(timeout=60)
    result.update(index=segments, cpus=os.cpu_count(), machine=platform.machine(), python=platform.python_version())
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "api_load.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
