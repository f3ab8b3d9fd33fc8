"""Decode speed of a bundled language model on the CPU, in the serving engine: fp32, bf16 and int8 weights.

    PYTHONPATH=. python benchmarks/cpu_decode.py [--model qwen2.5-coder-0.5b] [--tokens 32] [--json OUT]

For each weight format the model is loaded alone (one at a time), then 1 and 16 requests run at once (greedy,
`--tokens` new tokens each, the same real prompt); reported: generated tokens per second over the whole batch,
and how far the int8 / bf16 outputs agree with fp32's. llama.cpp on the same GGUF is the peer to compare with
(`llama-cpp-python`, built from source); pass `--llama-cpp` to run it where it is installed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time

from mediaindex.agents.llm import ChatEngine
from mediaindex.config import LLMSettings, default_cache_dir

PROMPT = [{"role": "user", "content": "Summarise in one sentence: And so, my fellow Americans, ask not what your "
                                      "country can do for you, ask what you can do for your country."}]


def run(stage: ChatEngine, n: int, tokens: int) -> tuple[float, list[str]]:
    stage.chat([PROMPT], max_tokens=4)  # warm-up (and the prompt's pages cached for every request)
    t0 = time.perf_counter()
    outs = stage.chat([PROMPT] * n, max_tokens=tokens)
    took = time.perf_counter() - t0
    return sum(o.tokens for o in outs) / took, [o.text for o in outs]


def llama_cpp(gguf: str, n: int, tokens: int, threads: int) -> float:
    from llama_cpp import Llama  # a benchmark peer only, never a dependency

    llm = Llama(model_path=gguf, n_ctx=512, n_threads=threads, verbose=False)
    t0 = time.perf_counter()
    done = 0
    for _ in range(n):  # llama-cpp-python serves one sequence at a time
        out = llm.create_chat_completion(PROMPT, max_tokens=tokens, temperature=0.0)
        done += out["usage"]["completion_tokens"]
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--formats", nargs="*", default=["float32", "bfloat16", "int8"])
    ap.add_argument("--llama-cpp", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    report: dict = {"model": args.model, "tokens": args.tokens, "machine": f"{platform.machine()}, "
                    f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.0f} at start", "runs": []}
    reference: list[str] | None = None
    for fmt in args.formats:
        settings = LLMSettings(model=args.model, dtype="bfloat16" if fmt == "int8" else fmt, cpu_int8=fmt == "int8",
                               max_num_seqs=16, guided_decoding=False)
        t0 = time.perf_counter()
        stage = ChatEngine(settings, default_cache_dir())
        load = time.perf_counter() - t0
        for n in (1, 16):
            rate, texts = run(stage, n, args.tokens)
            if n == 1 and reference is None:
                reference = texts
            row = {"weights": fmt, "concurrent": n, "tokens_per_s": round(rate, 2), "load_s": round(load, 1),
                   "same_text_as_first_format": n == 1 and reference is not None and texts[0] == reference[0],
                   "text": texts[0][:120]}
            report["runs"].append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
        del stage
        gc.collect()
    if args.llama_cpp:
        from mediaindex.models.bundled import assemble_gguf, bundled_lm

        gguf = str(assemble_gguf(bundled_lm(args.model), default_cache_dir()))
        for n in (1, 16):
            row = {"weights": "llama.cpp (GGUF)", "concurrent": n,
                   "tokens_per_s": round(llama_cpp(gguf, n, args.tokens, os.cpu_count() or 1), 2)}
            report["runs"].append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)


if __name__ == "__main__":
    main()
