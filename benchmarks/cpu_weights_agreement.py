"""How far int8 / int4 CPU weights agree with bf16 on a bundled model, and how fast one request decodes.

    PYTHONPATH=. python benchmarks/cpu_weights_agreement.py [--model qwen2.5-coder-0.5b] \\
        [--variants bf16 int8 int4:64 int4:64:int8 ...] [--activations int8|bf16] [--chunk 16] [--tokens 32] \\
        [--json OUT]

A variant is BODY[:GROUP[:HEAD[:PATTERN,...]]] (`llm.cpu_weights`, `llm.cpu_group_size`, `llm.cpu_head`,
`llm.cpu_int8_layers`), e.g. `int4:64:bf16:*.down_proj,*.v_proj`. For each one:
- teacher-forced top-1 agreement with bf16 over real reference transcripts of the sample media (every position of
  the text, `--chunk` positions a call on the model's cache, through the quantized weights: prompt chunks are not
  sent to bf16 here, and chunks of a decode batch's size run the decode kernels), and the share of positions
  where bf16 chose clearly (top-2 logit margin > 0.5) that agree;
- greedy-text equality with bf16 on the agent prompts (the tool-calling system prompt and the questions of
  benchmarks/guided_overhead.py, `--answer-tokens` free tokens each, through the engine as served);
- single-request decode tokens/s: (time for 1 + N tokens − time for 1 token) over N, ignoring EOS, median of
  `--repeats`; CPU seconds of the process beside wall time.
Packing goes through the model cache (`mediaindex.config.default_cache_dir()`), so a variant packs once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from mediaindex.agents.toolcall import tools_system_prompt
from mediaindex.config import default_cache_dir
from mediaindex.models.bundled import bundled_lm, bundled_lm_dir
from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams
from mediaindex.serving.model_runner import load_pretrained
from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu, source_fingerprint

MEDIA = Path(os.environ.get("MEDIAINDEX_MEDIA_DIR", Path(__file__).resolve().parent.parent.parent / "shared" / "media"))
QUESTIONS = ["When does the speaker say banana?", "Who assembled in London to sketch the manifesto?",
             "What were the fine glasses for?", "What permission does the license grant for the software?"]


def reference_texts(media: Path) -> list[str]:
    """Reference transcripts of the sample media (the MANIFEST's for jfk and LibriSpeech, the subtitle file's and
    the word-level JSON's for the others), each cut to about 1,500 characters."""
    texts = ["And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
             "country.",
             "If the reader will excuse me, I will say nothing of my antecedents, nor of the circumstances which led "
             "me to leave my native country. The narrative would be tedious to him and painful to myself."]
    srt = (media / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    lines = [ln for ln in srt.splitlines() if ln.strip() and not ln.strip().isdigit() and "-->" not in ln]
    texts.append(" ".join(lines)[:1500])
    apollo = json.loads((media / "groundtruth" / "apollo11.whisper-large.words.json").read_text(encoding="utf-8"))
    texts.append(str(apollo["text"]).strip()[:1500])
    return texts


def parse_variant(text: str) -> CpuWeights | None:
    parts = text.split(":")
    if parts[0] == "bf16" and len(parts) == 1:
        return None
    body = parts[0]
    group = int(parts[1]) if len(parts) > 1 else 64
    head = parts[2] if len(parts) > 2 else "bf16"
    int8_layers = tuple(parts[3].split(",")) if len(parts) > 3 else ()
    return CpuWeights(body=body, head=head, group_size=group, int8_layers=int8_layers)  # type: ignore[arg-type]


def load(source: str, name: str, weights: CpuWeights | None, prefill: str,
         activations: str) -> tuple[Any, Any, float]:
    model, tok = load_pretrained(source, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    if weights is not None:
        split = CpuWeights(weights.body, weights.head, weights.group_size, prefill,  # type: ignore[arg-type]
                           weights.int8_layers, activations)  # type: ignore[arg-type]
        quantize_cpu(model, split, model_id=source_fingerprint(source), name=name, cache_dir=default_cache_dir())
    return model, tok, time.perf_counter() - t0


def teacher_forced(model: Any, tok: Any, texts: list[str], chunk: int) -> list[torch.Tensor]:
    """Logits at every position of each text, fed ``chunk`` positions a call on the model's cache (0: the whole
    text at once). Chunks as short as a decode batch run the layers' decode kernels."""
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tok(text, return_tensors="pt").input_ids
            step = chunk or ids.shape[1]
            past, logits = None, []
            for i in range(0, ids.shape[1], step):
                result = model(ids[:, i : i + step], past_key_values=past, use_cache=True)
                past = result.past_key_values
                logits.append(result.logits.float()[0])
            out.append(torch.cat(logits))
    return out


def agreement(ref: list[torch.Tensor], out: list[torch.Tensor]) -> dict[str, float]:
    r, o = torch.cat(ref), torch.cat(out)
    same = r.argmax(-1) == o.argmax(-1)
    top2 = r.topk(2, -1).values
    clear = top2[:, 0] - top2[:, 1] > 0.5
    return {"positions": int(same.numel()), "top1_agreement": round(same.float().mean().item(), 4),
            "clear_positions": int(clear.sum()), "clear_agreement": round(same[clear].float().mean().item(), 4)}


def answers(engine: LLMEngine, tokens: int) -> list[str]:
    system = tools_system_prompt("You answer questions about an archive of indexed videos.")
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": q}] for q in QUESTIONS]
    return [o.text for o in engine.generate(chats, SamplingParams(max_tokens=tokens))]


def decode_rate(engine: LLMEngine, tokens: int, repeats: int) -> dict[str, Any]:
    chat = [{"role": "user", "content": "Summarise in one sentence: And so, my fellow Americans, ask not what your "
                                        "country can do for you, ask what you can do for your country."}]
    engine.generate([chat], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up

    def timed(n: int) -> tuple[float, float]:
        w, c = time.perf_counter(), time.process_time()
        engine.generate([chat], SamplingParams(max_tokens=n, ignore_eos=True))
        return time.perf_counter() - w, time.process_time() - c

    rates, cpu = [], []
    for _ in range(repeats):
        one, one_cpu = timed(1)
        many, many_cpu = timed(1 + tokens)
        rates.append(tokens / max(many - one, 1e-9))
        cpu.append((many_cpu - one_cpu) / tokens)
    return {"decode_tokens_per_s": round(statistics.median(rates), 2),
            "decode_tokens_per_s_range": [round(min(rates), 2), round(max(rates), 2)],
            "cpu_s_per_token": round(statistics.median(cpu), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--variants", nargs="*", default=["bf16", "int8", "int8:64:int8", "int4:64", "int4:64:int8"])
    ap.add_argument("--tokens", type=int, default=32, help="decoded tokens per speed measurement")
    ap.add_argument("--answer-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--media", type=Path, default=MEDIA)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--activations", choices=["int8", "bf16"], default="int8",
                    help="`llm.cpu_activations`: int8 runs decode batches on the batched kernel")
    ap.add_argument("--chunk", type=int, default=16,
                    help="positions per teacher-forced call (a decode batch's rows; 0 = the whole text at once)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    lm = bundled_lm(args.model)
    source = str(bundled_lm_dir(lm, default_cache_dir())) if lm else args.model
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", args.model)
    texts = reference_texts(args.media)
    report: dict = {"model": args.model, "threads": torch.get_num_threads(), "rows": [],
                    "activations": args.activations, "chunk": args.chunk,
                    "load_average_start": os.getloadavg()}
    ref_logits: list[torch.Tensor] | None = None
    ref_answers: list[str] | None = None
    for variant in args.variants:
        weights = parse_variant(variant)
        model, tok, _ = load(source, name, weights, "quantized", args.activations)
        logits = teacher_forced(model, tok, texts, args.chunk)
        ref_logits = ref_logits or logits
        row: dict = {"variant": variant, **agreement(ref_logits, logits)}
        del model
        model, tok, pack_s = load(source, name, weights, "bf16", args.activations)
        engine = LLMEngine(model, tok, EngineConfig(device="cpu", max_num_seqs=4))
        texts_out = answers(engine, args.answer_tokens)
        ref_answers = ref_answers or texts_out
        row["pack_or_cache_s"] = round(pack_s, 1)
        row["same_answers"] = f"{sum(a == b for a, b in zip(texts_out, ref_answers, strict=True))}/{len(QUESTIONS)}"
        if not args.no_speed:
            row.update(decode_rate(engine, args.tokens, args.repeats))
        row["load_average"] = round(os.getloadavg()[0], 2)
        row["first_answer"] = texts_out[0][:100]
        report["rows"].append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
        del engine, model
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
