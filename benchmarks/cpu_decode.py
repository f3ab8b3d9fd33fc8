"""Decode speed of a bundled language model on the CPU: the serving engine (bf16, int8, int4 weights) beside
llama.cpp on the same model's GGUF, on equal terms.

    PYTHONPATH=. python benchmarks/cpu_decode.py [--model qwen2.5-coder-0.5b] [--formats bf16 int8 int4] \\
        [--tokens 32] [--concurrency 1 4 16] [--rounds 5] \\
        [--llama-batched-bench PATH] [--llama-build-flags "GGML_NATIVE=ON ..."] [--json OUT]

What makes the comparison fair, and what is recorded so a reader can check it:
- the same prompt length on both sides: the engine's chat prompt is tokenized by the model's tokenizer and
  llama.cpp's `llama-batched-bench` gets that count as `-npp` (it decodes after a synthetic prompt of that many
  tokens); both share the prompt across the concurrent sequences (`-pps`; the engine's prefix sharing);
- the same number of generated tokens: the engine ignores end-of-sequence tokens and generates exactly `--tokens`
  decode steps per sequence (checked), as `-ntg` does;
- the engine never reuses a cached prompt between measurements: each run's prompt starts with its own run number
  (digits are single tokens, so the length stays the same);
- per cell (side, weights, concurrent sequences): decode-only tokens/s (engine: time for 1 + N tokens minus time
  for 1 token; llama.cpp: its `speed_tg`) and whole tokens/s (prompt + decode), as the median and range over
  `--rounds` rounds that alternate which side runs first;
- CPU seconds beside wall time (the engine: this process's user + system time; llama.cpp: the child's, from
  RUSAGE_CHILDREN), the load average before and after every run, thread counts on both sides, the CPU model and
  its vector flags (lscpu), torch's version, llama.cpp's version line (`--version`) and build flags (as given).
Run it on a quiet machine: the load average columns show whether it was.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import torch

from mediaindex.agents.llm import ChatEngine
from mediaindex.config import LLMSettings, default_cache_dir
from mediaindex.serving import SamplingParams

QUESTION = ("Summarise in one sentence: And so, my fellow Americans, ask not what your country can do for you, ask "
            "what you can do for your country.")
FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                     "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def prompt(run: int) -> list[dict[str, str]]:
    """The chat of one measurement. The run number comes first (before the chat template's default system text)
    so the engine cannot reuse a page of an earlier run's prompt."""
    return [{"role": "system", "content": f"Run {run % 100:02d}. You are a helpful assistant."},
            {"role": "user", "content": QUESTION}]


def prompt_token_ids(tokenizer: Any, chat: list[dict[str, str]]) -> list[int]:
    """The chat's prompt tokens. Under transformers 5 `apply_chat_template(tokenize=True)` returns a
    BatchEncoding (whose len() is its number of keys) unless asked for plain ids."""
    ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):  # a batch of one
        ids = ids[0]
    return [int(i) for i in ids]


def prompt_length(model: str) -> int:
    """Prompt tokens of a measurement's chat for a bundled model (the same for every run number)."""
    from transformers import AutoTokenizer

    from mediaindex.models.bundled import bundled_lm, bundled_lm_dir

    lm = bundled_lm(model)
    tok = AutoTokenizer.from_pretrained(str(bundled_lm_dir(lm, default_cache_dir())) if lm else model)
    return len(prompt_token_ids(tok, prompt(0)))


def cpu_description() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "logical_cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return info
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("Flags", "").split())
    info.update({"model": fields.get("Model name"), "sockets": fields.get("Socket(s)"),
                 "cores_per_socket": fields.get("Core(s) per socket"), "threads_per_core": fields.get("Thread(s) per core"),
                 "vector_flags": [f for f in FLAGS_OF_INTEREST if f in flags],
                 "hypervisor": fields.get("Hypervisor vendor")})
    return info


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measured(fn: Callable[[], Any], who: int = resource.RUSAGE_SELF) -> tuple[Any, float, float]:
    """fn's result, wall seconds and CPU seconds (of this process, or of its finished children)."""
    c0, w0 = _cpu_seconds(who), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - w0, _cpu_seconds(who) - c0


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


class EngineSide:
    """One weight format in the serving engine, loaded once and measured in every round."""

    def __init__(self, model: str, fmt: str, max_seqs: int, threads: int) -> None:
        settings = LLMSettings(model=model, dtype="bfloat16", cpu_weights=fmt, max_num_seqs=max_seqs,
                               guided_decoding=False, cpu_threads=threads)
        t0 = time.perf_counter()
        self.chat = ChatEngine(settings, default_cache_dir())
        self.load_s = time.perf_counter() - t0
        self.engine = self.chat.engine
        self.fmt = fmt
        self.engine.generate([prompt(99)], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up

    def run(self, run: int, n: int, tokens: int) -> dict[str, Any]:
        def generate(steps: int, chat: list[dict[str, str]]) -> list[Any]:
            outs = self.engine.generate([chat] * n, SamplingParams(max_tokens=steps, ignore_eos=True))
            assert all(len(o.token_ids) == steps for o in outs), [len(o.token_ids) for o in outs]
            return outs

        before = load_average()
        # Two fresh prompts: the prompt-only run must not leave its pages for the full run to reuse.
        _, first_s, first_cpu = measured(lambda: generate(1, prompt(2 * run)))
        outs, whole_s, whole_cpu = measured(lambda: generate(1 + tokens, prompt(2 * run + 1)))
        decode_s = max(whole_s - first_s, 1e-9)
        return {"prompt_tokens": len(outs[0].prompt_token_ids), "generated_per_sequence": tokens,
                "decode_tokens_per_s": n * tokens / decode_s, "tokens_per_s": n * tokens / whole_s,
                "wall_s": whole_s, "cpu_s": whole_cpu, "decode_cpu_s": max(whole_cpu - first_cpu, 0.0),
                "threads": torch.get_num_threads(), "load_average_before": before, "load_average_after": load_average(),
                "text": outs[0].text[:80]}


class LlamaCppFailed(RuntimeError):
    """llama.cpp's run failed; the message says how and with which command."""


def llama_version(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return " | ".join(line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip())


def llama_batched_bench(binary: str, gguf: str, prompt_tokens: int, n: int, tokens: int,
                        threads: int) -> dict[str, Any]:
    """llama.cpp decoding `n` sequences at once after one shared prompt of `prompt_tokens` tokens."""
    cmd = [binary, "-m", gguf, "-c", str(max(512, prompt_tokens + n * tokens + 64)), "-b", "512", "-ub", "512",
           "-npp", str(prompt_tokens), "-ntg", str(tokens), "-npl", str(n), "-pps", "-t", str(threads),
           "-tb", str(threads), "--output-format", "jsonl"]
    before = load_average()
    done, wall, cpu = measured(lambda: subprocess.run(cmd, capture_output=True, text=True),
                               resource.RUSAGE_CHILDREN)
    rows = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LlamaCppFailed(f"llama-batched-bench exited with {done.returncode} ({last[:200]}): {' '.join(cmd)}")
    row = json.loads(rows[-1])
    file_type = next((ln.split("=", 1)[-1].strip() for ln in done.stderr.splitlines() if "file type" in ln), "unknown")
    # speed_tg: n × ntg / decode time; t: prompt + decode time of the measured batch.
    return {"prompt_tokens": int(row.get("pp", prompt_tokens)), "generated_per_sequence": int(row.get("tg", tokens)),
            "decode_tokens_per_s": float(row["speed_tg"]), "tokens_per_s": n * tokens / float(row["t"]),
            "gguf_file_type": file_type, "wall_s": float(row["t"]), "process_wall_s": wall, "cpu_s": cpu, "threads": threads,
            "load_average_before": before, "load_average_after": load_average()}


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and range per (side, weights, concurrent) cell."""
    cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        cells.setdefault((r["side"], r["weights"], r["concurrent"]), []).append(r)
    table = []
    for (side, weights, n), rows in cells.items():
        cell: dict[str, Any] = {"side": side, "weights": weights, "concurrent": n, "rounds": len(rows),
                                "prompt_tokens": rows[0]["prompt_tokens"]}
        for key in ("decode_tokens_per_s", "tokens_per_s", "cpu_s", "load_average_before"):
            values = [float(r[key]) for r in rows]
            cell[key] = round(statistics.median(values), 2)
            cell[key + "_range"] = [round(min(values), 2), round(max(values), 2)]
        table.append(cell)
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| side | weights | concurrent | prompt tokens | decode tok/s median (range) | whole tok/s median (range) "
             "| CPU s | load avg before |", "|---|---|---|---|---|---|---|---|"]
    for c in table:
        d, w = c["decode_tokens_per_s_range"], c["tokens_per_s_range"]
        lines.append(f"| {c['side']} | {c['weights']} | {c['concurrent']} | {c['prompt_tokens']} | "
                     f"{c['decode_tokens_per_s']} ({d[0]}–{d[1]}) | {c['tokens_per_s']} ({w[0]}–{w[1]}) | "
                     f"{c['cpu_s']} | {c['load_average_before']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--formats", nargs="*", default=["bf16", "int8", "int4"], choices=["bf16", "int8", "int4"])
    ap.add_argument("--tokens", type=int, default=32, help="decode steps per sequence on both sides")
    ap.add_argument("--concurrency", nargs="*", type=int, default=[1, 4, 16])
    ap.add_argument("--rounds", type=int, default=3, help="rounds, alternating which side runs first")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads on both sides")
    ap.add_argument("--llama-batched-bench", metavar="PATH", help="llama.cpp's llama-batched-bench binary")
    ap.add_argument("--llama-build-flags", default="not given", help="how that binary was built (cmake flags)")
    ap.add_argument("--gguf", help="the GGUF for llama.cpp (default: the bundled model's, from the model cache)")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {
        "model": args.model, "tokens": args.tokens, "concurrency": args.concurrency, "rounds": args.rounds,
        "cpu": cpu_description(), "torch": torch.__version__, "engine_threads": args.threads,
        "load_average_at_start": list(os.getloadavg()), "runs": []}
    report["prompt_tokens"] = prompt_length(args.model)
    sides: list[EngineSide] = []
    for fmt in args.formats:
        side = EngineSide(args.model, fmt, max(args.concurrency), args.threads)
        report.setdefault("engine_load_s", {})[fmt] = round(side.load_s, 1)
        sides.append(side)
    gguf = args.gguf
    if args.llama_batched_bench:
        from mediaindex.models.bundled import assemble_gguf, bundled_lm

        if gguf is None:
            lm = bundled_lm(args.model)
            if lm is None:
                ap.error(f"{args.model} is not a bundled model: pass --gguf")
            gguf = str(assemble_gguf(lm, default_cache_dir()))
        report["llama_cpp"] = {"binary": args.llama_batched_bench, "version": llama_version(args.llama_batched_bench),
                               "build_flags": args.llama_build_flags, "gguf": os.path.basename(gguf),
                               "threads": args.threads}
    run_id = 0
    for round_ in range(args.rounds):
        order = ["engine", "llama.cpp"] if round_ % 2 == 0 else ["llama.cpp", "engine"]
        for who in order:
            for n in args.concurrency:
                if who == "engine":
                    for side in sides:
                        run_id += 1
                        row = {"round": round_, "side": "engine", "weights": side.fmt, "concurrent": n,
                               **side.run(run_id, n, args.tokens)}
                        if row["prompt_tokens"] != report["prompt_tokens"]:
                            raise SystemExit(f"the engine's prompt has {row['prompt_tokens']} tokens, llama.cpp "
                                             f"gets {report['prompt_tokens']}: the comparison would not be fair")
                        _emit(report, row)
                elif args.llama_batched_bench and gguf:
                    try:
                        measured_row = llama_batched_bench(args.llama_batched_bench, gguf, report["prompt_tokens"], n,
                                                           args.tokens, args.threads)
                    except LlamaCppFailed as exc:  # recorded, and the engine's rounds go on
                        report.setdefault("llama_cpp_errors", []).append(str(exc))
                        print(f"llama.cpp failed: {exc}", flush=True)
                        continue
                    _emit(report, {"round": round_, "side": "llama.cpp", "weights": "GGUF", "concurrent": n,
                                   **measured_row})
    report["load_average_at_end"] = list(os.getloadavg())
    report["table"] = summarize(report["runs"])
    print(markdown(report["table"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
    del sides
    gc.collect()


def _emit(report: dict[str, Any], row: dict[str, Any]) -> None:
    row = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
    report["runs"].append(row)
    print(json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
