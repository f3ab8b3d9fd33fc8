"""Quality of HQQ 8-bit and 4-bit SmolLM2-135M-Instruct against BF16 on real text.

Perplexity on the manifesto captions and the reference transcripts of the test media, top-1
agreement with BF16 under teacher forcing on the same text, and free-running greedy agreement on
a few chat prompts. Usage: ``python benchmarks/quant_quality.py [--threads 2] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quant_common import (  # noqa: E402
    Timer,
    chat_ids,
    greedy_ids,
    load_smollm2,
    machine,
    perplexity,
    real_texts,
)
from mediaindex.serving.quant import QuantConfig, quantize_model  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Summarise in one sentence: workers of the world unite, you have nothing to lose but your chains.",
    "Name three planets of the solar system.",
    "Write a short sentence about the Apollo 11 moon landing.",
]


@torch.no_grad()
def top1_agreement(
    model: torch.nn.Module, ref: torch.nn.Module, tokenizer: object, texts: dict[str, str]
) -> float:
    same = total = 0
    for text in texts.values():
        ids = tokenizer(text, return_tensors="pt").input_ids[:, :512]  # type: ignore[operator]
        a = model(input_ids=ids).logits.argmax(-1)
        b = ref(input_ids=ids).logits.argmax(-1)
        same += int((a == b).sum())
        total += a.numel()
    return same / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument(
        "--no-generate", action="store_true", help="perplexity and teacher-forced agreement only"
    )
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[64])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    bf16, tokenizer = load_smollm2(torch.bfloat16)
    texts = real_texts()
    n_tokens = sum(len(tokenizer(t).input_ids) for t in texts.values())
    prompts = [chat_ids(tokenizer, p) for p in PROMPTS]
    ref_out = [greedy_ids(bf16, p, args.new_tokens) for p in prompts]
    results: dict[str, dict[str, object]] = {
        "bf16": {
            "perplexity": perplexity(bf16, tokenizer, texts),
            "answers": [tokenizer.decode(o) for o in ref_out],
        }
    }
    runs = [(bits, g) for bits in (8, 4) for g in args.group_sizes]
    for bits, group in runs:
        key = f"int{bits}" if args.group_sizes == [64] else f"int{bits}-g{group}"
        model = copy.deepcopy(bf16)
        with Timer() as t:
            quantize_model(model, QuantConfig(bits=bits, group_size=group))
        outs = [greedy_ids(model, p, args.new_tokens) for p in prompts]
        agree = sum(int((o == r).sum()) for o, r in zip(outs, ref_out, strict=True)) / sum(
            len(r) for r in ref_out
        )
        prefix = [
            int((o != r).nonzero()[0, 0]) if bool((o != r).any()) else len(r)
            for o, r in zip(outs, ref_out, strict=True)
        ]
        results[key] = {
            "perplexity": perplexity(model, tokenizer, texts),
            "top1_agreement_teacher_forced": top1_agreement(model, bf16, tokenizer, texts),
            "greedy_token_agreement": agree,
            "greedy_identical_prefix": prefix,
            "quantize_seconds": round(t.seconds, 1),
            "answers": [tokenizer.decode(o) for o in outs],
        }
        print(key, {k: v for k, v in results[key].items() if k != "answers"}, flush=True)
        del model
    base = float(results["bf16"]["perplexity"])  # type: ignore[arg-type]
    for key in results:
        if key == "bf16":
            continue
        ppl = float(results[key]["perplexity"])  # type: ignore[arg-type]
        results[key]["perplexity_change_pct"] = round(100 * (ppl / base - 1), 2)
    report = {"machine": machine(), "text_tokens": n_tokens, "texts": list(texts), "results": results}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
