"""The Triton paged decode-attention kernel against the PyTorch reference path (gather + dequantise + SDPA), run
on CPU through Triton's interpreter, plus how the engine picks its decode attention.

The interpreter must be chosen before triton is first imported (triton.language's own helpers are jit functions
decorated at import), and other tests of a session may import triton first. So the kernel tests run in a child
pytest process started with TRITON_INTERPRET=1 (the `interpreted_triton_tests` fixture, shared with
test_grouped_experts.py; `test_kernels_under_triton_interpreter` checks their outcomes); in the parent they skip. Running the suite with TRITON_INTERPRET=1 set from the start runs them in-process instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams, ServingError
from mediaindex.serving.attention import torch_decode_attention, torch_latent_decode_attention
from mediaindex.serving.attention_backend import select_decode_attention, select_latent_decode_attention
from mediaindex.serving.kv_cache import KVLayout, PagedKVCache

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

# Half-precision tolerances: both paths round their inputs (dequantised pages, probabilities) to the model dtype
# once and accumulate in fp32, so they may differ by an ulp or two of outputs of magnitude ~1-4
# (bf16 ulp at 2-4: 2**-6; fp16: 2**-9). fp32 paths differ only in summation order.
TOLERANCE = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=4e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=1.6e-2),
}
# Under the interpreter bf16 dots run in fp32, so the kernel keeps FP8 pages' dequantised values (each token at its
# own scale) unrounded where the reference rounds them to bf16: up to about one more bf16 ulp of difference.
FP8_BF16_TOLERANCE = dict(atol=4.5e-2, rtol=1.6e-2)


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
needs_interpreter = pytest.mark.skipif(
    not INTERPRETED, reason="runs in the TRITON_INTERPRET=1 child process of test_kernels_under_triton_interpreter"
)


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="already under the interpreter: the kernel tests run in this process")
def test_kernels_under_triton_interpreter(interpreted_triton_tests):
    outcomes = interpreted_triton_tests.outcomes["test_triton_decode.py"]
    assert "passed" in outcomes.values(), interpreted_triton_tests.output
    assert not {"failed", "error"} & set(outcomes.values()), interpreted_triton_tests.output


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    return importlib.import_module("mediaindex.serving.triton_decode")


def _filled_cache(
    kind: str, n_kv: int, dk: int, dv: int, context: list[int], page_size: int = 8, seed: int = 0,
    latent: bool = False,
) -> tuple[PagedKVCache, torch.Tensor, torch.Tensor]:
    """A two-layer cache whose pages hold random K/V for requests of the given context lengths, each on its own
    scattered pages (layer 1 gets data of another scale, so a kernel reading layer 0's scales would fail).
    Returns the cache, block tables [B, P] padded with page 0 as the engine pads them, and context lengths."""
    g = torch.Generator().manual_seed(seed)
    width = max(1, -(-max(context) // page_size))
    num_pages = 1 + sum(-(-c // page_size) for c in context)
    cache = PagedKVCache(KVLayout(2, n_kv, dk, dv, latent), num_pages, page_size, kind)
    free = (torch.randperm(num_pages - 1, generator=g) + 1).tolist()
    tables, slots = [], []
    for c in context:
        pages = [free.pop() for _ in range(-(-c // page_size))]
        tables.append((pages + [0] * width)[:width])
        slots += [pages[t // page_size] * page_size + t % page_size for t in range(c)]
    s = torch.tensor(slots, dtype=torch.int64)
    for layer, amp in ((0, 1.0), (1, 3.0)):
        k = torch.randn(len(slots), n_kv, dk, generator=g) * amp
        v = torch.randn(len(slots), n_kv, dv, generator=g) * amp
        cache.write(layer, s, k, v)
    return cache, torch.tensor(tables, dtype=torch.int64), torch.tensor(context, dtype=torch.int64)


def _step_inputs(n_req: int, n_heads: int, n_kv: int, dk: int, dv: int, dtype: torch.dtype, seed: int = 1):
    """q, own k and own v of one decode token per request, laid out as the engine hands them over (k and v are
    views of [heads, tokens, dim] tensors, so not contiguous over the request dimension)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_heads, n_req, dk, generator=g).to(dtype).transpose(0, 1)
    k = torch.randn(n_kv, n_req, dk, generator=g).to(dtype).transpose(0, 1)
    v = (torch.randn(n_kv, n_req, dv, generator=g) * 3.0).to(dtype).transpose(0, 1)
    return q, k, v


# Context lengths (page size 8): none (only the current token), partial pages, exactly one page, several pages.
CONTEXT = [0, 1, 5, 8, 37]


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(
    ("kind", "dtype"),
    [
        ("fp8_e4m3", torch.float32),
        ("fp32", torch.float32),
        ("fp8_e4m3", torch.float16),
        ("bf16", torch.float16),
        ("fp8_e4m3", torch.bfloat16),
        ("bf16", torch.bfloat16),
    ],
)
@pytest.mark.parametrize(("n_heads", "n_kv"), [(8, 2), (2, 2)], ids=["gqa", "mha"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_kernel_matches_reference(kernels, kind, dtype, n_heads, n_kv, head_dim):
    cache, tables, lens = _filled_cache(kind, n_kv, head_dim, head_dim, CONTEXT)
    q, k, v = _step_inputs(len(CONTEXT), n_heads, n_kv, head_dim, head_dim, dtype)
    ref = torch_decode_attention(cache, 1, q, k, v, tables, lens, None)
    scales = (cache.k_scale[1], cache.v_scale[1]) if cache.is_fp8 else (None, None)
    # 16-token tiles: the 37-token context spans three tiles and five pages; three splits put those tiles in
    # different programs, whose partial softmax states the merge kernel combines.
    for splits in (1, 3):
        got = kernels.paged_decode_attention(
            q, k, v, cache.k[1], cache.v[1], tables, lens, *scales, num_splits=splits, block_n=16
        )
        assert got.dtype == dtype and got.shape == (len(CONTEXT), n_heads, head_dim)
        tol = FP8_BF16_TOLERANCE if cache.is_fp8 and dtype == torch.bfloat16 else TOLERANCE[dtype]
        torch.testing.assert_close(got, ref, **tol, msg=lambda m, s=splits: f"{s} split(s): {m}")


@needs_triton
@needs_interpreter
def test_kernel_mla_shapes_and_scale(kernels):
    """K and V head dims differ (MLA, decompressed per head) and are not powers of two; an explicit softmax
    scale is honoured."""
    cache, tables, lens = _filled_cache("fp8_e4m3", 4, 24, 12, [3, 21])
    q, k, v = _step_inputs(2, 4, 4, 24, 12, torch.float32)
    ref = torch_decode_attention(cache, 0, q, k, v, tables, lens, 0.3)
    got = kernels.triton_decode_attention(cache, 0, q, k, v, tables, lens, 0.3)
    torch.testing.assert_close(got, ref, **TOLERANCE[torch.float32])


@needs_triton
@needs_interpreter
def test_kernel_counts_the_current_token_once_in_every_split(kernels):
    """With a context of zero tokens the output is exactly the token's own V, whatever the split count."""
    cache, tables, lens = _filled_cache("fp32", 2, 64, 64, [0, 0])
    q, k, v = _step_inputs(2, 4, 2, 64, 64, torch.float32)
    for splits in (1, 2):
        got = kernels.paged_decode_attention(q, k, v, cache.k[0], cache.v[0], tables, lens, num_splits=splits)
        torch.testing.assert_close(got, v.repeat_interleave(2, dim=1), atol=1e-6, rtol=0)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("window", [1, 6, 16, 40])
def test_kernel_sliding_window_matches_reference(kernels, window):
    """A sliding window skips tiles before it and masks inside the first tile it visits; windows shorter than a
    tile, spanning tiles, and longer than every context."""
    cache, tables, lens = _filled_cache("fp8_e4m3", 2, 64, 64, CONTEXT)
    q, k, v = _step_inputs(len(CONTEXT), 4, 2, 64, 64, torch.float32)
    ref = torch_decode_attention(cache, 1, q, k, v, tables, lens, None, window)
    scales = (cache.k_scale[1], cache.v_scale[1])
    for splits in (1, 3):
        got = kernels.paged_decode_attention(
            q, k, v, cache.k[1], cache.v[1], tables, lens, *scales, num_splits=splits, block_n=16, window=window
        )
        torch.testing.assert_close(got, ref, **TOLERANCE[torch.float32])


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("kv", ["fp32", "fp8_e4m3"])
def test_engine_greedy_tokens_same_with_triton_backend(kernels, kv, tiny_models, char_tokenizer, h):
    """The engine with the kernel forced (interpreted) generates the same greedy tokens as with the reference
    path: batched requests of different lengths, chunked prefill mixed with decodes, page size 4."""
    prompts = h.random_prompts([5, 17, 9, 1])
    outputs = {}
    for backend in ("torch", "triton"):
        model, _ = tiny_models("llama")
        cfg = EngineConfig(
            page_size=4, num_pages=64, kv_cache_dtype=kv, max_num_batched_tokens=12, attention_backend=backend
        )
        engine = LLMEngine(model, char_tokenizer, cfg)
        assert engine.runner.attention_backend == backend
        outs = engine.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
        assert all(o.error is None and len(o.token_ids) == 8 for o in outs)
        outputs[backend] = [o.token_ids for o in outs]
    assert outputs["triton"] == outputs["torch"]


@needs_triton
@needs_interpreter
def test_engine_sliding_window_same_with_triton_backend(kernels, tiny_models, char_tokenizer, h):
    """Mixtral reads its sliding window from the config at every forward: with a window of 8 the kernel's greedy
    tokens match transformers' own."""
    model, ref_model = tiny_models("mixtral")
    for m in (model, ref_model):
        m.config.sliding_window = 8
    prompts = h.random_prompts([5, 19], seed=2)
    refs = [h.hf_greedy(ref_model, p, 12) for p in prompts]
    cfg = EngineConfig(page_size=4, num_pages=64, max_num_batched_tokens=12, attention_backend="triton")
    outs = LLMEngine(model, char_tokenizer, cfg).generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    assert [o.token_ids for o in outs] == refs


# -- MLA over latent pages ---------------------------------------------------------------------------------------


def _latent_inputs(n_req: int, n_heads: int, rank: int, rope: int, dtype: torch.dtype, seed: int = 4):
    """q_latent, q_rope, own latent and own rotary key, laid out as `mla` hands them over (q_rope and the latent
    are views with strided rows)."""
    g = torch.Generator().manual_seed(seed)
    q_latent = (torch.randn(n_req, n_heads, rank, generator=g) / rank**0.25).to(dtype)
    q_rope = torch.randn(n_heads, n_req, rope, generator=g).to(dtype).transpose(0, 1)
    compressed = torch.randn(n_req, rank + rope, generator=g).to(dtype)
    return q_latent, q_rope, compressed[:, :rank], torch.randn(n_req, rope, generator=g).to(dtype)


def _latent_cache(kind: str, rank: int, rope: int, context: list[int], page_size: int = 8):
    """Latent pages (one "head": latents in the K part, rotary keys in the V part) of random content."""
    return _filled_cache(kind, 1, rank, rope, context, page_size, latent=True)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(
    ("kind", "dtype"),
    [("fp32", torch.float32), ("fp8_e4m3", torch.float32), ("bf16", torch.bfloat16), ("fp8_e4m3", torch.bfloat16),
     ("fp8_e4m3", torch.float16)],
)
@pytest.mark.parametrize(("n_heads", "rank", "rope"), [(4, 32, 8), (20, 64, 16)], ids=["tiny", "two-head-blocks"])
def test_latent_kernel_matches_reference(kernels, kind, dtype, n_heads, rank, rope):
    """The latent kernel against `torch_latent_decode_attention`: head counts below and above one head block
    (16), latent and rope sizes of tiny DeepSeek-V3 models, one and three splits."""
    cache, tables, lens = _latent_cache(kind, rank, rope, CONTEXT)
    q_latent, q_rope, latent, rope_key = _latent_inputs(len(CONTEXT), n_heads, rank, rope, dtype)
    ref = torch_latent_decode_attention(cache, 1, q_latent, q_rope, latent, rope_key, tables, lens, 0.25)
    scales = (cache.k_scale[1], cache.v_scale[1]) if cache.is_fp8 else (None, None)
    for splits in (1, 3):
        got = kernels.paged_latent_decode_attention(
            q_latent, q_rope, latent, rope_key, cache.k[1], cache.v[1], tables, lens, 0.25, *scales,
            num_splits=splits, block_n=16,
        )
        assert got.dtype == dtype and got.shape == (len(CONTEXT), n_heads, rank)
        tol = FP8_BF16_TOLERANCE if cache.is_fp8 and dtype == torch.bfloat16 else TOLERANCE[dtype]
        torch.testing.assert_close(got, ref, **tol, msg=lambda m, s=splits: f"{s} split(s): {m}")


@needs_triton
@needs_interpreter
def test_latent_kernel_deepseek_v3_width(kernels):
    """DeepSeek-V3's own latent (512) and rope (64) sizes, FP8 pages, through the engine-facing wrapper."""
    cache, tables, lens = _latent_cache("fp8_e4m3", 512, 64, [3, 21], page_size=16)
    q_latent, q_rope, latent, rope_key = _latent_inputs(2, 16, 512, 64, torch.float32)
    ref = torch_latent_decode_attention(cache, 0, q_latent, q_rope, latent, rope_key, tables, lens, 0.07)
    got = kernels.triton_latent_decode_attention(cache, 0, q_latent, q_rope, latent, rope_key, tables, lens, 0.07)
    torch.testing.assert_close(got, ref, **TOLERANCE[torch.float32])


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("kv", ["fp32", "fp8_e4m3"])
def test_engine_mla_greedy_tokens_same_with_triton_backend(kernels, kv, tiny_models, char_tokenizer, h):
    """DeepSeek-V3 over latent pages: the latent kernel forced (interpreted) generates the same greedy tokens as
    the reference path, and at fp32 pages the same as transformers."""
    prompts = h.random_prompts([5, 17, 9], seed=3)
    outputs = {}
    for backend in ("torch", "triton"):
        model, ref_model = tiny_models("deepseek_v3")
        cfg = EngineConfig(
            page_size=4, num_pages=64, kv_cache_dtype=kv, max_num_batched_tokens=12, attention_backend=backend
        )
        engine = LLMEngine(model, char_tokenizer, cfg)
        assert engine.runner.attention_backend == backend and engine.kv_cache.layout.latent
        outs = engine.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
        outputs[backend] = [o.token_ids for o in outs]
    assert outputs["triton"] == outputs["torch"]
    if kv == "fp32":
        assert outputs["triton"] == [h.hf_greedy(ref_model, p, 8) for p in prompts]


# -- selection -------------------------------------------------------------------------------------------------


def _cpu_cache(kind: str = "fp32") -> PagedKVCache:
    return PagedKVCache(KVLayout(1, 2, 16, 16), 4, 4, kind)


def test_auto_on_cpu_falls_back_with_reason(caplog):
    with caplog.at_level(logging.INFO, logger="mediaindex.serving.attention_backend"):
        name, fn = select_decode_attention("auto", _cpu_cache())
    assert (name, fn) == ("torch", torch_decode_attention)
    assert "reference path (the KV cache is on cpu)" in caplog.text


def test_forced_torch_is_the_reference():
    assert select_decode_attention("torch", _cpu_cache("fp8_e4m3")) == ("torch", torch_decode_attention)
    latent = PagedKVCache(KVLayout(1, 1, 32, 8, latent=True), 4, 4, "fp8_e4m3")
    assert select_latent_decode_attention("torch", latent) == ("torch", torch_latent_decode_attention)
    assert select_latent_decode_attention("auto", latent) == ("torch", torch_latent_decode_attention)


def test_forced_triton_on_cpu_without_interpreter_fails_loudly(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ServingError, match="not CUDA"):
        select_decode_attention("triton", _cpu_cache())


def test_engine_config_rejects_unknown_backend():
    with pytest.raises(ValueError, match="attention_backend"):
        EngineConfig(attention_backend="flash")


def test_backend_reaches_the_engine_from_settings_and_environment(monkeypatch, tmp_path):
    from mediaindex.agents.llm import engine_config
    from mediaindex.config import load_settings

    assert engine_config(load_settings("gpu", index_dir=tmp_path).llm).attention_backend == "auto"
    monkeypatch.setenv("MEDIAINDEX_LLM__ATTENTION_BACKEND", "torch")
    assert engine_config(load_settings("gpu", index_dir=tmp_path).llm).attention_backend == "torch"


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="compiles real GPU code: needs triton.jit without the interpreter")
@pytest.mark.parametrize(
    ("q_ty", "page_ty", "group", "head_dim"),
    [("*bf16", "*u8", 8, 128), ("*fp16", "*u8", 1, 64), ("*bf16", "*bf16", 4, 128), ("*fp32", "*fp32", 4, 128),
     ("*bf16", "*u8", 16, 256)],
)
def test_kernel_compiles_for_hopper_without_spills(q_ty, page_ty, group, head_dim, tmp_path, monkeypatch):
    """Ahead-of-time compilation for sm_90 with Triton's bundled ptxas (no GPU needed): catches what the
    interpreter does not check (FP8 conversion support, dot shapes, types in the compiled loop), and the tile
    size the launcher picks must not spill registers to the stack."""
    import shutil

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mediaindex.serving import triton_decode as td

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    dtype = {"*bf16": torch.bfloat16, "*fp16": torch.float16, "*fp32": torch.float32}[q_ty]
    dot = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[dtype]
    block_d = max(16, head_dim)
    const = dict(
        H=2 * group, GROUP=group, PAGE_SIZE=16, DK=head_dim, DV=head_dim, BLOCK_G=max(16, group),
        BLOCK_N=td.default_block_n(block_d, dtype, page_ty == "*u8"), BLOCK_DK=block_d, BLOCK_DV=block_d, IS_FP8=page_ty == "*u8",
        DOT_DTYPE=dot, IEEE=dot == tl.float32, NUM_SPLITS_IS_ONE=False,
    )
    pointers = {"q_ptr": q_ty, "kn_ptr": q_ty, "vn_ptr": q_ty, "out_ptr": q_ty, "kc_ptr": page_ty, "vc_ptr": page_ty,
                "bt_ptr": "*i64", "ctx_ptr": "*i64"}
    names = td._decode_kernel.arg_names
    sig = {
        n: pointers.get(n) or ("constexpr" if n in const else "*fp32" if n.endswith("_ptr") else
                               "fp32" if n == "qk_scale" else "i32")
        for n in names
    }
    src = ASTSource(td._decode_kernel, sig, constexprs={(names.index(k),): v for k, v in const.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert kernel.asm["cubin"]
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if shutil.which(str(cuobjdump)):
        cubin = tmp_path / "decode.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
        assert "STACK:0 " in usage.stdout, usage.stdout


@needs_triton
@pytest.mark.skipif(INTERPRETED, reason="compiles real GPU code: needs triton.jit without the interpreter")
@pytest.mark.parametrize(("q_ty", "page_ty"), [("*bf16", "*u8"), ("*bf16", "*bf16"), ("*fp16", "*u8")])
def test_latent_kernel_compiles_for_hopper_without_spills(q_ty, page_ty, tmp_path, monkeypatch):
    """The latent kernel at DeepSeek-V3's sizes (128 heads, latent 512, rope 64), compiled ahead of time for sm_90
    with the launcher's tile sizes and warp count: it compiles, and its tiles stay in registers."""
    import shutil

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mediaindex.serving import triton_decode as td

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    dot = {"*bf16": tl.bfloat16, "*fp16": tl.float16}[q_ty]
    const = dict(
        H=128, PAGE_SIZE=16, R=512, DR=64, BLOCK_H=td.LATENT_BLOCK_H, BLOCK_N=td.LATENT_BLOCK_N, BLOCK_R=512,
        BLOCK_DR=64, IS_FP8=page_ty == "*u8", DOT_DTYPE=dot, IEEE=False, NUM_SPLITS_IS_ONE=False,
    )
    pointers = {"ql_ptr": q_ty, "qr_ptr": q_ty, "ln_ptr": q_ty, "rn_ptr": q_ty, "out_ptr": q_ty, "lc_ptr": page_ty,
                "rc_ptr": page_ty, "bt_ptr": "*i64", "ctx_ptr": "*i64"}
    names = td._latent_decode_kernel.arg_names
    sig = {
        n: pointers.get(n) or ("constexpr" if n in const else "*fp32" if n.endswith("_ptr") else
                               "fp32" if n == "qk_scale" else "i32")
        for n in names
    }
    src = ASTSource(td._latent_decode_kernel, sig, constexprs={(names.index(k),): v for k, v in const.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": td.LATENT_NUM_WARPS})
    assert kernel.asm["cubin"]
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if shutil.which(str(cuobjdump)):
        cubin = tmp_path / "latent.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
        print(usage.stdout)
        assert "STACK:0 " in usage.stdout, usage.stdout
