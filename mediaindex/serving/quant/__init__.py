"""HQQ 4- and 8-bit weights for transformers models, MoE experts included.

One module serves every stage that runs transformer weights (the language model, the vision
stage's CLIP towers). Calibration-free: no data is needed to quantize.

Quantize a loaded model in place (the backend is attached too: Gemlite kernels on CUDA when the
``gpu`` extra is installed, else HQQ's PyTorch path, with the reason logged), then save::

    from mediaindex.serving.quant import QuantConfig, quantize_model, save_quantized

    model = quantize_model(model, QuantConfig(bits=4, group_size=64), data_dir=settings.cache_dir)
    save_quantized(model, "ckpt-dir")

Load without re-quantizing (the skeleton is built on the ``meta`` device, then filled with the
packed tensors, so a 4-bit checkpoint never exists in full precision in memory)::

    model = load_quantized("ckpt-dir", device="cuda", data_dir=settings.cache_dir,
                           expected_config=None, verify=True, backend=None)
    save_autotune_cache(settings.cache_dir)   # after warm-up, so the next start skips tuning

Split precision (prefill through one weight set, decode through another, everything else shared)::

    split = build_split_precision(model, prefill="bf16", decode="int4")       # from full precision
    split = load_split_precision(prefill=model_or_ckpt_dir, decode="int4-ckpt-dir")   # from disk
    out = split.prefill_model(input_ids=prompt, past_key_values=cache)   # prompt tokens of a step
    out = split.decode_model(input_ids=next_ids, past_key_values=cache)  # decode tokens of a step

Both views are plain transformers models with the same forward signature and config, so one KV
cache serves both. Embeddings, norms, router gates, output head and rotary tables are the same
module objects in both. ``split.model_for("prefill" | "decode")`` picks a view by phase; a step that
mixes new prompts and decoding sequences runs its prefill tokens through one call and its decode
tokens through the other. ``weights: {prefill: bf16|int8, decode: int4|int8|bf16}`` maps directly
onto the ``prefill`` / ``decode`` arguments (fp8 is refused: it needs kernels this package lacks).

What gets quantized: every ``nn.Linear`` (attention incl. DeepSeek-V3 MLA ``q_a_proj``, ``q_b_proj``,
``kv_a_proj_with_mqa``, ``kv_b_proj``, ``o_proj``; dense and shared-expert MLPs; CLIP towers and
projections) and every fused experts module of transformers 5.x (``experts.gate_up_proj`` /
``experts.down_proj``, quantized per expert and run by :class:`QuantExperts`: token slots sorted by
expert, one grouped call per projection over the packed codes, a C kernel on CPU and a Triton kernel on
CUDA). Kept in high precision unless ``QuantConfig.skip`` says otherwise: embeddings, norms,
router gates (``*.gate``, ``*.router``), ``lm_head``. Layers whose width is not a multiple of the
group size are kept too, and logged; ``model.quant_plan`` lists what was done.

CPU decode (no GPU kernels): :mod:`.cpu_weights` turns a loaded model's linear layers into int8
(:mod:`.cpu_int8`, per channel) or int4 (:mod:`.cpu_int4`, HQQ group-wise codes packed for torch's
``_weight_int4pack_mm_for_cpu``) and caches the packed tensors, hash-checked (:mod:`.packed_cache`)::

    from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu

    quantize_cpu(model, CpuWeights(body="int4", head="int8", group_size=32), model_id=path, cache_dir=cache)

Errors: :class:`QuantizationError` (a ``ConfigError``) for bad settings or unsupported modules,
:class:`QuantCheckpointError` (a ``ModelLoadError``) for missing, corrupt, truncated or mismatched
checkpoints.
"""

from mediaindex.serving.quant.backends import (
    apply_backend,
    autotune_cache_path,
    resolve_backend,
    save_autotune_cache,
)
from mediaindex.serving.quant.checkpoint import (
    FORMAT_VERSION,
    load_quantized,
    read_checkpoint_meta,
    save_quantized,
)
from mediaindex.serving.quant.config import (
    DEFAULT_SKIP,
    QuantCheckpointError,
    QuantConfig,
    QuantizationError,
)
from mediaindex.serving.quant.layers import QuantExperts, QuantLinear
from mediaindex.serving.quant.model import (
    QuantPlan,
    count_quantized,
    plan_quantization,
    quantize_model,
    quantized_modules,
    weight_bytes,
)
from mediaindex.serving.quant.split import (
    SplitPrecisionModel,
    build_split_precision,
    load_split_precision,
)

__all__ = [
    "DEFAULT_SKIP",
    "FORMAT_VERSION",
    "QuantCheckpointError",
    "QuantConfig",
    "QuantExperts",
    "QuantLinear",
    "QuantPlan",
    "QuantizationError",
    "SplitPrecisionModel",
    "apply_backend",
    "autotune_cache_path",
    "build_split_precision",
    "count_quantized",
    "load_quantized",
    "load_split_precision",
    "plan_quantization",
    "quantize_model",
    "quantized_modules",
    "read_checkpoint_meta",
    "resolve_backend",
    "save_autotune_cache",
    "save_quantized",
    "weight_bytes",
]
