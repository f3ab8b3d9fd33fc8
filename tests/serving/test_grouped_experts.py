"""Grouped quantized experts: the CPU C kernel and the Triton fused kernel (in Triton's interpreter) against the
reference loop over experts, with no host sync and no per-expert Python work in the forward; the engine's output
is the same on both paths.

The Triton tests run in the TRITON_INTERPRET=1 child pytest process of the `interpreted_triton_tests` fixture,
with those of test_triton_decode.py (the interpreter must be chosen before triton is first imported).
"""

from __future__ import annotations

import importlib.util
import logging
import os

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams
from mediaindex.serving.quant import QuantConfig, QuantExperts, grouped_cpu, quantize_model
from mediaindex.serving.quant import layers as layers_mod
from mediaindex.serving.quant.layers import PackSpec, dequantize_weight, quantize_weight

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
needs_interpreter = pytest.mark.skipif(
    not INTERPRETED, reason="runs in the TRITON_INTERPRET=1 child process of test_triton_kernel_under_interpreter"
)
# What reads a tensor's values on the host (a device sync on CUDA) or builds data-dependent Python control flow.
HOST_READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "nonzero", "unique", "numpy", "cpu"}


def _experts(num_experts: int = 8, hidden: int = 128, inter: int = 64, seed: int = 0) -> Qwen3MoeExperts:
    config = Qwen3MoeConfig(hidden_size=hidden, moe_intermediate_size=inter, num_experts=num_experts)
    layer = Qwen3MoeExperts(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.gate_up_proj.normal_(0, 0.1, generator=gen)
        layer.down_proj.normal_(0, 0.1, generator=gen)
    return layer


def _quantized(bits: int, dtype: torch.dtype, num_experts: int = 8, group_size: int = 32) -> QuantExperts:
    experts = _experts(num_experts).to(dtype)
    return QuantExperts.from_experts(experts, QuantConfig(bits=bits, group_size=group_size)).eval()


def _routing(tokens: int, num_experts: int, dtype: torch.dtype, top_k: int = 2, seed: int = 1):
    """Skewed routing: half the tokens go to expert 0, the last expert gets none, and a few slots carry indices
    outside [0, E) (slots another device owns under expert parallelism), which must contribute nothing."""
    gen = torch.Generator().manual_seed(seed + tokens)
    hidden = torch.randn(tokens, 128, generator=gen).to(dtype)
    index = torch.stack([torch.randperm(num_experts - 1, generator=gen)[:top_k] for _ in range(tokens)])
    index[: tokens // 2, 0] = 0
    index[1::7, 1] = -1
    index[3::11, 1] = num_experts
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), dim=-1).to(dtype)
    return hidden, index, weights


TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


class _Calls(TorchFunctionMode):
    """Records the name of every torch function and tensor method called."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _calls(layer: QuantExperts, tokens: int) -> list[str]:
    inputs = _routing(tokens, layer.num_experts, layer.compute_dtype)
    with torch.no_grad(), _Calls() as calls:
        layer(*inputs)
    return calls.names


def _check_matches_reference(kernel: str, bits: int, dtype: torch.dtype) -> None:
    layer = _quantized(bits, dtype)
    layer.kernel = kernel
    for tokens in (1, 5, 37, 160):
        inputs = _routing(tokens, layer.num_experts, dtype)
        with torch.no_grad():
            got = layer(*inputs)
            want = layer.forward_reference(*inputs)
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, **TOLERANCE[dtype], msg=lambda m, t=tokens: f"{t} tokens: {m}")


def _check_no_host_reads_and_no_per_expert_work(kernel: str) -> None:
    small, large = _quantized(4, torch.float32, num_experts=8), _quantized(4, torch.float32, num_experts=32)
    small.kernel = large.kernel = kernel
    calls = _calls(small, 3)
    assert not HOST_READS & set(calls), calls
    # The same torch calls whatever the number of experts or tokens: nothing loops over experts in Python.
    assert _calls(large, 3) == calls and _calls(small, 40) == calls


# ------------------------------------------------------------------------------------------------ CPU kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bits", [8, 4])
def test_cpu_grouped_path_matches_the_reference_loop(bits: int, dtype: torch.dtype) -> None:
    assert _quantized(bits, dtype).grouped_path(torch.device("cpu")) == "cpu"
    _check_matches_reference("auto", bits, dtype)


def test_cpu_grouped_path_reads_nothing_on_the_host_and_does_not_loop_over_experts() -> None:
    _check_no_host_reads_and_no_per_expert_work("auto")
    # The check sees host reads where there are some: the reference loop reads the expert counts.
    reference = _quantized(4, torch.float32)
    reference.kernel = "reference"
    assert "tolist" in _calls(reference, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bits", [8, 4])
def test_cpu_kernel_handles_widths_that_are_not_a_tile_multiple(bits: int, dtype: torch.dtype) -> None:
    """42 outputs: 16-wide tiles leave a partial one (8-bit), 4-bit pairs leave 5 of 8 (panel and direct paths)."""
    spec = PackSpec(42, 128, bits, 32, 1)
    gen = torch.Generator().manual_seed(5)
    packed = [quantize_weight(torch.randn(42, 128, generator=gen), spec, optimize=False) for _ in range(3)]
    codes, scale, zero = (torch.stack([p[i] for p in packed]) for i in range(3))
    counts = torch.tensor([2, 0, 9])
    x = torch.randn(int(counts.sum()) + 1, 128, generator=gen).to(dtype)  # one slot of no local expert
    got = grouped_cpu.grouped_matmul(
        x, counts.cumsum(0), codes, scale, zero, out_features=42, group_size=32, bits=bits, compute_dtype=dtype
    )
    rows = torch.arange(len(x)).split([*counts.tolist(), 1])
    for e, r in enumerate(rows[:3]):
        w = dequantize_weight(codes[e], scale[e], zero[e], spec, dtype)
        # Outputs of magnitude ~30: fp32 sums in another order differ by a few 1e-6.
        tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else TOLERANCE[dtype]
        torch.testing.assert_close(got[r].to(dtype), F.linear(x[r], w), **tol)
    assert torch.equal(got[rows[3]], torch.zeros(1, 42))


def test_unsupported_group_size_falls_back_to_the_loop_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    layer, other = _quantized(8, torch.float32, group_size=8), _quantized(8, torch.float32, group_size=8)
    layers_mod._FALLBACKS_LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="mediaindex.serving.quant.layers"):
        assert layer.grouped_path(torch.device("cpu")) == "reference"
        assert other.grouped_path(torch.device("cpu")) == "reference"
    assert caplog.text.count("multiples of 16") == 1, caplog.text  # once, not once per layer
    inputs = _routing(9, layer.num_experts, torch.float32)
    with torch.no_grad():
        assert torch.equal(layer(*inputs), layer.forward_reference(*inputs))


@pytest.mark.parametrize("bits", [8, 4])
def test_engine_output_is_the_same_on_the_grouped_path_and_the_loop(bits, tiny_models, char_tokenizer, h) -> None:
    model, _ = tiny_models("qwen3_moe")
    quantize_model(model, QuantConfig(bits=bits, group_size=32))
    layers = [m for m in model.modules() if isinstance(m, QuantExperts)]
    assert layers and all(m.grouped_path(torch.device("cpu")) == "cpu" for m in layers)
    prompts = h.random_prompts([5, 11, 1, 8])

    def greedy() -> list[list[int]]:
        engine = LLMEngine(model, char_tokenizer, EngineConfig(page_size=4, num_pages=64))
        outs = engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
        assert all(o.error is None for o in outs)
        return [o.token_ids for o in outs]

    grouped = greedy()
    for layer in layers:
        layer.kernel = "reference"
    assert greedy() == grouped


# ------------------------------------------------------------------------------------------------ Triton kernel


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="already under the interpreter: the kernel tests run in this process")
def test_triton_kernel_under_interpreter(interpreted_triton_tests) -> None:
    outcomes = interpreted_triton_tests.outcomes["test_grouped_experts.py"]
    assert outcomes and set(outcomes.values()) == {"passed"}, (outcomes, interpreted_triton_tests.output)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bits", [8, 4])
def test_triton_fused_kernel_matches_the_reference_loop(bits: int, dtype: torch.dtype) -> None:
    _check_matches_reference("triton", bits, dtype)


@needs_triton
@needs_interpreter
def test_triton_fused_path_reads_nothing_on_the_host_and_does_not_loop_over_experts() -> None:
    _check_no_host_reads_and_no_per_expert_work("triton")


@needs_triton
@needs_interpreter
def test_triton_fused_blocks_cover_each_expert_once() -> None:
    from mediaindex.serving.quant import triton_moe
    from mediaindex.serving.quant.routing import sort_by_expert

    _, index, weights = _routing(37, 8, torch.float32)
    slots = sort_by_expert(index, weights, 8)
    expert, start, stop = triton_moe._blocks(slots, index.numel())
    covered = torch.zeros(index.numel(), dtype=torch.int64)
    for e, a, b in zip(expert.tolist(), start.tolist(), stop.tolist(), strict=True):
        if e < 0:
            continue
        lo, hi = int(slots.ends[e] - slots.counts[e]), int(slots.ends[e])
        assert lo <= a < min(a + triton_moe.BLOCK_M, b) <= hi
        covered[a : min(a + triton_moe.BLOCK_M, b)] += 1
    valid = int(slots.ends[-1])
    assert covered[:valid].eq(1).all() and covered[valid:].eq(0).all()


@pytest.mark.gpu
@needs_triton
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_makes_no_device_sync() -> None:
    layer = _quantized(4, torch.bfloat16).cuda()
    assert layer.grouped_path(torch.device("cuda")) == "triton"
    inputs = [t.cuda() for t in _routing(37, layer.num_experts, torch.bfloat16)]
    with torch.no_grad():
        layer(*inputs)  # compiles the kernel
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = layer(*inputs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        want = layer.forward_reference(*inputs)
    torch.testing.assert_close(got, want, **TOLERANCE[torch.bfloat16])
