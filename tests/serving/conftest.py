"""Shared fixtures for the serving tests: tiny random models of each supported architecture, a real character
tokenizer for them, the real SmolLM2-135M-Instruct (slow tests only), and one interpreted run of the Triton kernel
tests."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from tests.serving import interpreted
from tests.serving.interpreted import InterpretedRun

# MEDIAINDEX_TEST_TORCH_THREADS=1 for a machine shared with other work: there every op that splits over threads
# waits for the others to be scheduled. Unset, torch uses every core (the real models' tests take half the time).
if os.environ.get("MEDIAINDEX_TEST_TORCH_THREADS"):
    torch.set_num_threads(int(os.environ["MEDIAINDEX_TEST_TORCH_THREADS"]))

VOCAB = 256
ARCHS = ["llama", "qwen3_moe", "mixtral", "deepseek_v3"]


def _config(arch: str):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        # A wider init than the default spreads the logits, so greedy choices are not near-ties that any
        # change of summation order could flip.
        initializer_range=0.1,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
    )
    if arch == "llama":
        return LlamaConfig(num_key_value_heads=2, **common)
    if arch == "qwen3_moe":
        return Qwen3MoeConfig(
            num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
            decoder_sparse_step=1, **common,
        )
    if arch == "mixtral":
        return MixtralConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **common)
    if arch == "deepseek_v3":
        return DeepseekV3Config(
            num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
            n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=32, q_lora_rank=48,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, **common,
        )
    raise ValueError(arch)


_CLASSES = {
    "llama": LlamaForCausalLM,
    "qwen3_moe": Qwen3MoeForCausalLM,
    "mixtral": MixtralForCausalLM,
    "deepseek_v3": DeepseekV3ForCausalLM,
}


def make_model(arch: str, seed: int = 0) -> PreTrainedModel:
    torch.manual_seed(seed)
    model = _CLASSES[arch](_config(arch)).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(scope="session")
def tiny_models() -> Callable[[str], tuple[PreTrainedModel, PreTrainedModel]]:
    """arch -> (model for the engine, an independent copy for transformers' generate). Built once per arch; the
    engine switches its copy to paged attention, so every test gets fresh deep copies."""
    cache: dict[str, PreTrainedModel] = {}

    def get(arch: str) -> tuple[PreTrainedModel, PreTrainedModel]:
        if arch not in cache:
            cache[arch] = make_model(arch)
        return copy.deepcopy(cache[arch]), copy.deepcopy(cache[arch])

    return get


@pytest.fixture(scope="session")
def char_tokenizer() -> PreTrainedTokenizerFast:
    """A real (if tiny) tokenizer: one token per printable character, ids below VOCAB, with a chat template."""
    chars = [chr(c) for c in range(32, 127)]
    vocab = {"<unk>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    vocab.update({f"<x{i}>": i for i in range(len(vocab), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join back without separators
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" \
        "{% if add_generation_prompt %}assistant: {% endif %}"
    return fast


def random_prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(model: PreTrainedModel, prompt: list[int], max_new: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False
        )
    return out[0, len(prompt) :].tolist()


# -- real data and the real model -------------------------------------------------------------------------------


def media_dir() -> Path:
    env = os.environ.get("MEDIAINDEX_MEDIA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "media"


def real_texts() -> list[str]:
    """Caption text of manifesto.srt and the English reference transcripts listed in MANIFEST.md."""
    root = media_dir()
    srt = (root / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    captions = " ".join(
        line.strip() for line in srt.splitlines() if line.strip() and not line.strip().isdigit() and "-->" not in line
    )
    texts = [captions]
    manifest = (root / "MANIFEST.md").read_text(encoding="utf-8")
    section = manifest.split("## audio/")[1].split("\n## ")[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].endswith((".flac", ".wav", ".mp3", ".aiff")):
            continue
        ref = re.sub(r"\([^)]*\)", "", cells[-1]).strip()
        ref = re.sub(r"^[LR]: ", "", ref).replace('R: "', '"')
        if any(skip in ref for skip in ("same as", "hard case", "contains", "reading of")) or not ref.isascii():
            continue
        texts.append(ref.strip('" ').replace('" "', " "))
    return [t for t in texts if len(t) > 10]


@pytest.fixture(scope="session")
def smollm2() -> tuple[PreTrainedModel, object]:
    from mediaindex.serving.model_runner import load_smollm2

    try:
        model, tok = load_smollm2()
    except Exception as exc:  # a missing optional package must skip, not fail, the slow tests
        pytest.skip(f"SmolLM2 unavailable: {exc}")
    return model, tok


class Helpers:
    """Helper functions, handed to tests through the `h` fixture (test modules do not import conftest)."""

    make_model = staticmethod(make_model)
    random_prompts = staticmethod(random_prompts)
    hf_greedy = staticmethod(hf_greedy)
    real_texts = staticmethod(real_texts)
    media_dir = staticmethod(media_dir)


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    return Helpers


# -- Triton kernels under the interpreter -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def interpreted_triton_tests() -> InterpretedRun:
    """The kernel tests of `interpreted.SELECTION`, run once in a TRITON_INTERPRET=1 child pytest (started when the
    session collected a test that reads them: `tests/conftest.py`)."""
    return interpreted.result()
