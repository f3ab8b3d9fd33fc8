"""Walk a transformers model and swap its large linear weights and fused experts for HQQ ones."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from mediaindex.serving.quant.config import QuantConfig
from mediaindex.serving.quant.layers import (
    PackSpec,
    QuantExperts,
    QuantLinear,
    check_experts_layout,
    is_fused_experts,
)

log = logging.getLogger(__name__)


@dataclass
class QuantPlan:
    """Which modules get quantized (by dotted name) and which were left alone, with the reason."""

    linears: list[str] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"linears": self.linears, "experts": self.experts, "kept": self.kept}


def _children_first(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    # Parents before children, but a quantizable module's own children are not visited.
    for name, child in module.named_children():
        full = f"{prefix}.{name}" if prefix else name
        yield full, child
        if not isinstance(child, nn.Linear) and not is_fused_experts(child):
            yield from _children_first(child, full)


def plan_quantization(model: nn.Module, config: QuantConfig) -> QuantPlan:
    """Decide what :func:`quantize_model` will replace, without touching the model."""
    plan = QuantPlan()
    for name, module in _children_first(model):
        if isinstance(module, (QuantLinear, QuantExperts)):
            continue
        if isinstance(module, nn.Linear):
            if config.skips(name):
                plan.kept[name] = "skipped by config"
                continue
            spec = PackSpec(
                module.out_features, module.in_features, config.bits, config.group_size, config.axis
            )
            reason = spec.check()
            if reason is not None:
                plan.kept[name] = reason
                continue
            plan.linears.append(name)
        elif is_fused_experts(module):
            if config.skips(name) or not config.quantize_experts:
                plan.kept[name] = "skipped by config"
                continue
            _, hidden, inter = check_experts_layout(module)
            reason = (
                PackSpec(2 * inter, hidden, config.bits, config.group_size, config.axis).check()
                or PackSpec(hidden, inter, config.bits, config.group_size, config.axis).check()
            )
            if reason is not None:
                plan.kept[name] = reason
                continue
            plan.experts.append(name)
    return plan


def _set_module(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)


@torch.no_grad()
def quantize_model(
    model: nn.Module,
    config: QuantConfig | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> nn.Module:
    """Quantize ``model`` in place with HQQ, attach the matmul backend and return the model.

    Every ``nn.Linear`` not matched by ``config.skip`` becomes a :class:`QuantLinear`; every fused
    experts module (3-D ``gate_up_proj`` / ``down_proj``) becomes a :class:`QuantExperts` with each
    expert quantized separately. Embeddings, norms, router gates and the output head are untouched
    by default. The plan actually applied is stored on ``model.quant_plan`` and the settings on
    ``model.quant_config``. Layers whose shape does not fit the group size stay in high precision
    and are logged. The backend is ``config.backend`` (see :func:`apply_backend`); ``data_dir`` is
    where Gemlite's autotune cache lives.
    """
    config = config or QuantConfig()
    plan = plan_quantization(model, config)
    for name in plan.linears:
        linear = model.get_submodule(name)
        assert isinstance(linear, nn.Linear)
        _set_module(model, name, QuantLinear.from_linear(linear, config))
    for name in plan.experts:
        _set_module(model, name, QuantExperts.from_experts(model.get_submodule(name), config))
    unfit = {name: reason for name, reason in plan.kept.items() if reason != "skipped by config"}
    if unfit:
        shown = "; ".join(f"{n}: {r}" for n, r in list(unfit.items())[:3])
        log.warning(
            "kept %d linear layers in high precision (%s%s)",
            len(unfit),
            shown,
            "; ..." if len(unfit) > 3 else "",
        )
    log.info(
        "quantized %d linear layers and %d experts modules to %d bits (group size %d)",
        len(plan.linears),
        len(plan.experts),
        config.bits,
        config.group_size,
    )
    model.quant_plan = plan  # type: ignore[assignment]
    model.quant_config = config  # type: ignore[assignment]
    if plan.linears or plan.experts:
        from mediaindex.serving.quant.backends import apply_backend  # backends imports this module

        apply_backend(model, config.backend, data_dir=data_dir)
    return model


def quantized_modules(model: nn.Module) -> dict[str, QuantLinear | QuantExperts]:
    return {n: m for n, m in model.named_modules() if isinstance(m, (QuantLinear, QuantExperts))}


def count_quantized(model: nn.Module) -> dict[str, int]:
    """Counts for checks and logs: quantized linears, quantized experts (summed over layers), and
    full-precision fused expert tensors and linears still present."""
    counts = {"linears": 0, "experts": 0, "fp_expert_tensors": 0, "fp_linears": 0}
    for module in model.modules():
        if isinstance(module, QuantLinear):
            counts["linears"] += 1
        elif isinstance(module, QuantExperts):
            counts["experts"] += module.num_experts
        elif isinstance(module, nn.Linear):
            counts["fp_linears"] += 1
        elif is_fused_experts(module):
            counts["fp_expert_tensors"] += 2
    return counts


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes held by the model's parameters and buffers (tied tensors counted once), split into the
    quantized part (codes + scales + zeros) and everything else."""
    seen: set[int] = set()
    quantized = other = 0
    quant_ids = {
        id(t) for m in quantized_modules(model).values() for t in m.buffers(recurse=False) if t is not None
    }
    for tensor in list(model.parameters()) + list(model.buffers()):
        key = id(tensor)
        if key in seen:
            continue
        seen.add(key)
        size = tensor.numel() * tensor.element_size()
        if key in quant_ids:
            quantized += size
        else:
            other += size
    return {"quantized": quantized, "other": other, "total": quantized + other}
