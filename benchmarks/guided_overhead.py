"""Cost of guided decoding: the same batch of chats, free and under a grammar, in alternating rounds.

Each round runs 16 chat requests through one SmolLM2 engine either free (ignore_eos, fixed length) or guided by
the agent's first-turn grammar (one `search` tool call) and by a JSON schema. Reported per round: generated tokens
per second, milliseconds per step, and the time the engine spent masking logits and advancing grammars (its own
timer), as a share of the round and per generated token. Outputs differ in length between the sides, so tokens
per second compare only roughly; the grammar's share of the time is the direct cost. Rounds alternate (free,
guided, guided, free, ...) so a change in machine load hits both sides alike.

    PYTHONPATH=. python benchmarks/guided_overhead.py [--rounds 4] [--requests 16] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from mediaindex.agents.guides import first_turn_grammar
from mediaindex.agents.toolcall import tools_system_prompt
from mediaindex.serving import EngineConfig, Guide, LLMEngine, SamplingParams

QUESTIONS = ["When does the speaker say banana?", "Who assembled in London to sketch the manifesto?",
             "What were the fine glasses for?", "What permission does the license grant for the software?"]
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 60},
    "chapters": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
        "start": {"type": "number"}, "title": {"type": "string", "maxLength": 40}},
        "required": ["start", "title"], "additionalProperties": False}}},
    "required": ["title", "chapters"], "additionalProperties": False}


def run(engine: LLMEngine, chats: list, params: SamplingParams) -> dict:
    before = engine.metrics()
    t0 = time.perf_counter()
    outs = engine.generate(chats, params)
    wall = time.perf_counter() - t0
    after = engine.metrics()
    assert all(o.error is None for o in outs), [o.error for o in outs]
    tokens = sum(len(o.token_ids) for o in outs)
    guide = after.extra["guide_seconds"] - before.extra["guide_seconds"]
    return {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall,
            "ms_per_step": 1000 * wall / (after.num_steps - before.num_steps),
            "guide_share": guide / wall, "guide_us_per_token": 1e6 * guide / tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    engine = LLMEngine.from_smollm2(EngineConfig(max_num_seqs=args.requests))
    system = tools_system_prompt("You answer questions about an archive of indexed videos.")
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
             for i in range(args.requests)]
    sides = {
        "free": SamplingParams(max_tokens=48, ignore_eos=True),
        "tool call grammar": SamplingParams(max_tokens=160, guide=Guide(first_turn_grammar())),
        "JSON schema": SamplingParams(max_tokens=160, guide=Guide.json_schema(SCHEMA)),
    }
    for params in sides.values():  # warm-up: grammar compilation and first-call costs are not measured
        run(engine, chats[:2], params)
    results: dict[str, list[dict]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            results[name].append(run(engine, chats, sides[name]))
            print(name, json.dumps({k: round(v, 2) for k, v in results[name][-1].items()}), flush=True)
    summary = {
        name: {"tokens_per_s": statistics.median(x["tokens_per_s"] for x in rows),
               "ms_per_step": statistics.median(x["ms_per_step"] for x in rows),
               "tokens_per_round": statistics.median(x["tokens"] for x in rows),
               "guide_share": statistics.median(x["guide_share"] for x in rows),
               "guide_us_per_token": statistics.median(x["guide_us_per_token"] for x in rows)}
        for name, rows in results.items()
    }
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}",
              "requests": args.requests, "rounds": args.rounds, "median": summary, "rounds_detail": results}
    print(json.dumps({"machine": report["machine"], "median": summary}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
