"""Split precision: one set of weights for prefill, another for decode, everything else shared.

Prefill is compute-bound and loses speed when 4-bit weights must be expanded first; decode reads
every active weight per token and gains from smaller ones. :class:`SplitPrecisionModel` holds two
views of one model: ``prefill_model`` and ``decode_model``. They are ordinary transformers models
(same class, same config, same forward signature); only the quantized linears / experts differ. All
other modules (embeddings, norms, router gates, output head, rotary tables) are the *same* module
objects in both, so their storage is held once. A KV cache written by one view is read by the other.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from mediaindex.serving.quant.checkpoint import (
    _check_config,
    _skeleton_module,
    load_quantized,
    read_checkpoint_meta,
)
from mediaindex.serving.quant.config import QuantCheckpointError, QuantConfig, QuantizationError
from mediaindex.serving.quant.layers import QuantExperts, QuantLinear
from mediaindex.serving.quant.model import _set_module, plan_quantization, quantize_model, weight_bytes

PrefillWeights = Literal["bf16", "int8"]
DecodeWeights = Literal["int4", "int8", "bf16"]
_BITS = {"int4": 4, "int8": 8}


def _clone_along(model: nn.Module, names: list[str]) -> nn.Module:
    """Shallow copy of ``model`` in which only the containers on the path to ``names`` are new objects;
    every other submodule, parameter and buffer is shared with ``model``."""
    paths = {""}
    for name in names:
        parts = name.split(".")
        paths.update(".".join(parts[:i]) for i in range(1, len(parts)))

    def clone(module: nn.Module, prefix: str) -> nn.Module:
        new = copy.copy(module)
        new._parameters = dict(module._parameters)
        new._buffers = dict(module._buffers)
        children: dict[str, Any] = {}
        for child_name, child in module._modules.items():
            full = f"{prefix}.{child_name}" if prefix else child_name
            children[child_name] = clone(child, full) if child is not None and full in paths else child
        new._modules = children
        return new

    return clone(model, "")


@dataclass
class SplitPrecisionModel:
    """Two weight sets over shared modules. ``prefill`` / ``decode`` name the precision of each.

    Engine use, per scheduler step::

        logits = split.prefill_model(input_ids=prompt_ids, past_key_values=cache, ...).logits
        logits = split.decode_model(input_ids=last_ids, past_key_values=cache, ...).logits
        # or split.model_for("prefill" | "decode")
    """

    prefill_model: nn.Module
    decode_model: nn.Module
    prefill: str
    decode: str

    def model_for(self, phase: Literal["prefill", "decode"]) -> nn.Module:
        if phase == "prefill":
            return self.prefill_model
        if phase == "decode":
            return self.decode_model
        raise ValueError(f"phase must be 'prefill' or 'decode', not {phase!r}")

    def shared_tensor_names(self) -> list[str]:
        """Names of parameters/buffers that are the same tensor object in both views."""
        decode: dict[str, torch.Tensor] = dict(self.decode_model.named_parameters(remove_duplicate=False))
        decode.update(self.decode_model.named_buffers(remove_duplicate=False))
        shared = []
        for name, tensor in [
            *self.prefill_model.named_parameters(remove_duplicate=False),
            *self.prefill_model.named_buffers(remove_duplicate=False),
        ]:
            if decode.get(name) is tensor:
                shared.append(name)
        return shared

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of both views together, every distinct tensor counted once."""
        seen: set[int] = set()
        total = 0
        for model in (self.prefill_model, self.decode_model):
            for tensor in [*model.parameters(), *model.buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    total += tensor.numel() * tensor.element_size()
        return {
            "prefill": weight_bytes(self.prefill_model)["total"],
            "decode": weight_bytes(self.decode_model)["total"],
            "total": total,
        }


def _check_choice(prefill: str, decode: str) -> None:
    if prefill not in ("bf16", "int8"):
        raise QuantizationError(
            f"prefill weights must be bf16 or int8, not {prefill!r} (fp8 needs GPU kernels this package lacks)"
        )
    if decode not in ("int4", "int8", "bf16"):
        raise QuantizationError(f"decode weights must be int4, int8 or bf16, not {decode!r}")


@torch.no_grad()
def build_split_precision(
    model: nn.Module,
    *,
    prefill: str = "bf16",
    decode: str = "int4",
    config: QuantConfig | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> SplitPrecisionModel:
    """Make prefill and decode weight sets from a full-precision ``model``.

    ``bf16`` means the model's own high-precision weights (load the model in bf16 for that); ``int8``
    / ``int4`` are HQQ with ``config``'s group size, axis, skip list and backend. ``model`` itself
    becomes the prefill view (quantized in place when ``prefill="int8"``); the decode view is a
    clone sharing every module that is not quantized. ``data_dir`` holds Gemlite's autotune cache.
    """
    _check_choice(prefill, decode)
    base = config or QuantConfig()
    if getattr(model, "quant_config", None) is not None:
        raise QuantizationError("build_split_precision needs the full-precision model, this one is quantized")
    if prefill == "bf16" and decode == "bf16":
        return SplitPrecisionModel(model, model, prefill, decode)
    if decode == "bf16":
        # Decode keeps the original weights: the clone holds the original modules, the prefill
        # view is then quantized in place.
        plan = plan_quantization(model, base.model_copy(update={"bits": _BITS[prefill]}))
        decode_model = _clone_along(model, plan.linears + plan.experts)
        quantize_model(model, base.model_copy(update={"bits": _BITS[prefill]}), data_dir=data_dir)
        return SplitPrecisionModel(model, decode_model, prefill, decode)
    decode_config = base.model_copy(update={"bits": _BITS[decode]})
    plan = plan_quantization(model, decode_config)
    decode_model = _clone_along(model, plan.linears + plan.experts)
    quantize_model(decode_model, decode_config, data_dir=data_dir)
    if prefill == "int8":
        if decode == "int8":
            return SplitPrecisionModel(decode_model, decode_model, prefill, decode)
        quantize_model(model, base.model_copy(update={"bits": 8}), data_dir=data_dir)
    return SplitPrecisionModel(model, decode_model, prefill, decode)


@torch.no_grad()
def _attach_quantized(
    base: nn.Module,
    path: str | os.PathLike[str],
    *,
    device: str | torch.device,
    verify: bool,
    data_dir: str | os.PathLike[str] | None = None,
) -> nn.Module:
    """A clone of ``base`` whose quantized modules come from the checkpoint at ``path``; all other
    modules are shared with ``base``. Only the quantized tensors of the checkpoint are read."""
    from mediaindex.serving.digest import file_sha256
    from mediaindex.serving.quant.checkpoint import WEIGHTS_FILE

    meta = read_checkpoint_meta(path)
    config = getattr(base, "config", None)
    if config is not None:
        _check_config(meta["model_config"], config)
    weights = os.path.join(path, str(meta.get("weights_file", WEIGHTS_FILE)))
    if not os.path.isfile(weights):
        raise QuantCheckpointError(f"{path}: weights file is missing")
    if os.path.getsize(weights) != meta.get("weights_bytes"):
        raise QuantCheckpointError(f"{weights}: size differs from the recorded one; the file is truncated")
    if verify and file_sha256(Path(weights)) != meta["weights_sha256"]:
        raise QuantCheckpointError(f"{weights}: checksum mismatch; the checkpoint is corrupt")
    names = list(meta["modules"])
    clone = _clone_along(base, names)
    try:
        with safe_open(weights, framework="pt", device=str(device)) as fh:
            keys = set(fh.keys())
            for name in names:
                try:
                    original = clone.get_submodule(name)
                except AttributeError as exc:
                    raise QuantCheckpointError(
                        f"checkpoint quantizes {name}, which the model does not have"
                    ) from exc
                skeleton = _skeleton_module(meta["modules"][name], original, name)
                for buf_name, slot in list(skeleton.named_buffers(recurse=False)):
                    if slot is None:
                        continue
                    key = f"{name}.{buf_name}"
                    if key not in keys:
                        raise QuantCheckpointError(f"{weights}: tensor {key} is missing")
                    tensor = fh.get_tensor(key)
                    if tuple(tensor.shape) != tuple(slot.shape) or tensor.dtype != slot.dtype:
                        raise QuantCheckpointError(f"{key}: shape or dtype differs from the model's")
                    skeleton._buffers[buf_name] = tensor
                _set_module(clone, name, skeleton)
    except SafetensorError as exc:
        raise QuantCheckpointError(f"{weights}: unreadable safetensors file: {exc}") from exc
    quant_config = QuantConfig.model_validate(meta["quant_config"])
    clone.quant_config = quant_config  # type: ignore[assignment]
    from mediaindex.serving.quant.backends import apply_backend

    apply_backend(clone, quant_config.backend, data_dir=data_dir)
    return clone.eval()


def _precision_name(model: nn.Module) -> str:
    bits = {m.bits for m in model.modules() if isinstance(m, (QuantLinear, QuantExperts))}
    if not bits:
        return "bf16"
    return "int" + "/".join(str(b) for b in sorted(bits))


def load_split_precision(
    prefill: str | os.PathLike[str] | nn.Module,
    decode: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    verify: bool = True,
    data_dir: str | os.PathLike[str] | None = None,
) -> SplitPrecisionModel:
    """Split precision from saved weights, without re-quantizing.

    ``prefill`` is a loaded model (e.g. the bf16 transformers model) or a quantized checkpoint
    directory; ``decode`` is a quantized checkpoint of the same model. Only the decode checkpoint's
    quantized tensors are read; all other modules come from the prefill side and are shared.
    """
    prefill_model = (
        prefill
        if isinstance(prefill, nn.Module)
        else load_quantized(prefill, device=device, verify=verify, data_dir=data_dir)
    )
    decode_model = _attach_quantized(prefill_model, decode, device=device, verify=verify, data_dir=data_dir)
    return SplitPrecisionModel(
        prefill_model, decode_model, _precision_name(prefill_model), _precision_name(decode_model)
    )
