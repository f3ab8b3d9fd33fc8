"""A loaded model's linear layers turned into int8 or int4 weights for torch's CPU weight-only kernels.

The layers (every ``nn.Linear``) and the output head each get a format: ``bf16`` (left as loaded), ``int8``
(per-channel symmetric, :mod:`cpu_int8`) or ``int4`` (HQQ group-wise, :mod:`cpu_int4`). Quantizing and packing run
once: the packed tensors go to a cache entry keyed by the model, the formats, the group size and torch's version,
checked by its SHA-256 on every load (:mod:`packed_cache`). With ``activations="int8"`` decode batches run the
batched kernel on 8-bit activations (:mod:`cpu_batched`), whose layouts are cached in the same entry. With
``prefill="bf16"`` each layer also keeps its loaded bf16 weight for prompt chunks (decode reads only the packed
codes); ``"quantized"`` keeps no copy.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from torch import Tensor, nn

from mediaindex.serving.quant import cpu_batched
from mediaindex.serving.quant.config import QuantizationError
from mediaindex.serving.quant.cpu_int4 import Int4Linear, check_int4_shape, int4_kernel_available
from mediaindex.serving.quant.cpu_int8 import Int8Linear, int8_kernel_available
from mediaindex.serving.quant.packed_cache import load_packed, packed_cache_path, save_packed

log = logging.getLogger(__name__)

PackedLinear = Int4Linear | Int8Linear
Format = Literal["bf16", "int8", "int4"]
HEAD = "lm_head"


@dataclass(frozen=True)
class CpuWeights:
    body: Format = "int4"  # every linear layer but the output head
    head: Format = "bf16"  # the output head (often tied to the embeddings)
    group_size: int = 32  # int4: input features per (scale, zero) pair
    prefill: Literal["bf16", "quantized"] = "bf16"
    # fnmatch patterns of layer names that take int8 where the body is int4 (the layers 4 bits hurt most, as
    # llama.cpp's Q4_K_M keeps some at higher precision), e.g. ("*.down_proj", "*.v_proj")
    int8_layers: tuple[str, ...] = ()
    # int8: decode batches quantize their activations and run the batched kernel (cpu_batched) where it can run
    activations: Literal["int8", "bf16"] = "int8"

    @property
    def quantizes(self) -> bool:
        return self.body != "bf16" or self.head != "bf16"


@dataclass(frozen=True)
class CpuQuantReport:
    int8_layers: int
    int4_layers: int
    from_cache: bool
    cache_path: Path | None
    batched_layers: int = 0  # layers whose decode batches run the batched kernel (8-bit activations)


def source_fingerprint(source: str) -> str:
    """What identifies a model's weights for the cache: its name or path, and for a local folder the size and
    modification time of its weight files (a changed checkpoint at the same path gets a new entry)."""
    path = Path(source)
    files = sorted(p for p in path.glob("*") if p.suffix in {".safetensors", ".bin", ".gguf"}) if path.is_dir() else []
    stamp = ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    return f"{source}#{hashlib.sha256(stamp.encode()).hexdigest()[:12]}" if files else source


def _plan(model: nn.Module, weights: CpuWeights) -> list[tuple[str, nn.Linear, Format]]:
    plan: list[tuple[str, nn.Linear, Format]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        fmt = weights.head if name.split(".")[-1] == HEAD else weights.body
        if fmt == "int4" and any(fnmatch.fnmatchcase(name, p) for p in weights.int8_layers):
            fmt = "int8"
        if fmt == "int4":
            reason = check_int4_shape(module.out_features, module.in_features, weights.group_size)
            if reason is not None:
                log.info("%s stays int8: %s", name, reason)
                fmt = "int8"
        if fmt != "bf16":
            plan.append((name, module, fmt))
    return plan


def _packed_keys(name: str, fmt: Format) -> tuple[str, str]:
    return (f"{name}.packed", f"{name}.scales_and_zeros") if fmt == "int4" else (f"{name}.codes", f"{name}.scales")


def _batched_keys(name: str) -> tuple[str, str]:
    return f"{name}.batched_codes", f"{name}.batched_scales"


def _from_cache(plan: list[tuple[str, nn.Linear, Format]], cached: dict[str, Tensor], group_size: int,
                batched: bool) -> dict[str, PackedLinear] | None:
    layers: dict[str, PackedLinear] = {}
    try:
        for name, linear, fmt in plan:
            first, second = (cached[k] for k in _packed_keys(name, fmt))
            layer: PackedLinear = (Int4Linear(first, second, group_size, linear.bias) if fmt == "int4"
                                else Int8Linear(first, second, linear.bias))
            if (layer.out_features, layer.in_features) != (linear.out_features, linear.in_features):
                raise QuantizationError(f"{name}: cached shape differs from the model's")
            codes_key, scales_key = _batched_keys(name)
            if batched and codes_key in cached:  # absent: a layer the batched kernel cannot take
                layer.set_batched(cached[codes_key], cached[scales_key])
            layers[name] = layer
    except (KeyError, QuantizationError) as exc:
        log.warning("packed weights cache does not match the model (%s); rebuilding it", exc)
        return None
    return layers


def _quantize(plan: list[tuple[str, nn.Linear, Format]], group_size: int, batched: bool) -> dict[str, PackedLinear]:
    layers: dict[str, PackedLinear] = {}
    reasons: set[str] = set()
    for name, linear, fmt in plan:
        layer = Int4Linear.from_linear(linear, group_size) if fmt == "int4" else Int8Linear.from_linear(linear)
        if batched and (reason := layer.use_batched_kernel()) is not None:
            reasons.add(reason)
        layers[name] = layer
    if reasons:
        log.info("some layers keep torch's kernels for decode batches: %s", "; ".join(sorted(reasons)))
    return layers


def quantize_cpu(model: nn.Module, weights: CpuWeights, *, model_id: str, cache_dir: Path | None = None,
                 name: str | None = None) -> CpuQuantReport:
    """Replace the model's linear layers in place as ``weights`` says, from the cache when a valid entry exists.
    ``model_id`` identifies the weights (see source_fingerprint); ``name`` starts the cache file's name."""
    plan = _plan(model, weights)
    formats = {fmt for _, _, fmt in plan}
    if "int8" in formats and not int8_kernel_available():
        raise QuantizationError("this torch build has no packed int8 CPU matmul (aten::_weight_int8pack_mm)")
    if "int4" in formats and not int4_kernel_available():
        raise QuantizationError("this torch build has no packed int4 CPU matmul (aten::_weight_int4pack_mm_for_cpu)")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise QuantizationError("int8 / int4 CPU weights need the model on the CPU")
    shapes = ";".join(f"{n}:{fmt}:{m.out_features}x{m.in_features}" for n, m, fmt in plan)
    # The batched kernel's layouts are cached beside torch's (deriving them takes seconds), where it can run.
    batched = weights.activations == "int8" and cpu_batched.unavailable() is None
    build = {"name": name, "model": model_id, "format": f"{weights.body}-head-{weights.head}",
             "group_size": weights.group_size, "layers": hashlib.sha256(shapes.encode()).hexdigest(),
             "batched": batched}
    path = packed_cache_path(cache_dir, build) if cache_dir is not None else None
    cached = load_packed(path, build) if path is not None else None
    layers = _from_cache(plan, cached, weights.group_size, batched) if cached is not None else None
    from_cache = layers is not None
    if layers is None:
        layers = _quantize(plan, weights.group_size, batched)
        if path is not None:
            tensors = {key: getattr(layers[name], key.rsplit(".", 1)[1])
                       for name, _, fmt in plan for key in _packed_keys(name, fmt)}
            for name, layer in layers.items():
                if layer.batched is not None:
                    tensors.update(zip(_batched_keys(name), layer.batched, strict=True))
            save_packed(path, build, tensors)
    for name, linear, _ in plan:
        layer = layers[name]
        if weights.prefill == "bf16":
            layer.keep_dense(linear.weight)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
    report = CpuQuantReport(sum(isinstance(m, Int8Linear) for m in layers.values()),
                            sum(isinstance(m, Int4Linear) for m in layers.values()), from_cache, path,
                            sum(layer.batched is not None for layer in layers.values()))
    log.info("CPU weights %s: %s", asdict(weights), report)
    return report
