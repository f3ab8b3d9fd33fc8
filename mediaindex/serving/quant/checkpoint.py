"""Quantized checkpoints: one safetensors file plus a small JSON, loaded without re-quantizing.

Layout of a checkpoint directory::

    quant_config.json   format name + version, quantization settings, the transformers model class
                        and config, one entry per quantized module, tensor names/shapes/dtypes,
                        tied-tensor aliases, and the size and SHA-256 of the weights file
    model.safetensors   packed HQQ codes, scales and zeros, plus every other parameter and buffer
                        (embeddings, norms, routers, output head, rotary tables) in its own dtype

Loading builds the model skeleton on the ``meta`` device (no memory behind it), swaps in empty
quantized modules, then assigns each tensor read from the file, so a 4-bit checkpoint never has the
full-precision weights in memory. Anything that does not line up (format, version, checksum, tensor
set, shapes, dtypes, model config) raises :class:`QuantCheckpointError`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from mediaindex.serving.digest import file_sha256
from mediaindex.serving.quant.config import (
    QuantCheckpointError,
    QuantConfig,
    QuantizationError,
    dtype_from_name,
    dtype_name,
)
from mediaindex.serving.quant.layers import QuantExperts, QuantLinear
from mediaindex.serving.quant.model import QuantPlan, _set_module, quantized_modules

log = logging.getLogger(__name__)

FORMAT_NAME = "mediaindex-hqq"
FORMAT_VERSION = 1
META_FILE = "quant_config.json"
WEIGHTS_FILE = "model.safetensors"
# Config keys that differ between otherwise identical models (bookkeeping, not architecture).
_CONFIG_KEYS_IGNORED = {"transformers_version", "_name_or_path", "dtype", "torch_dtype", "architectures"}


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, is_parameter) for all parameters and buffers, tied ones listed under each name."""
    out: list[tuple[str, torch.Tensor, bool]] = []
    for name, param in model.named_parameters(remove_duplicate=False):
        out.append((name, param, True))
    for name, buf in model.named_buffers(remove_duplicate=False):
        if buf is not None:
            out.append((name, buf, False))
    return out


def _module_entry(module: QuantLinear | QuantExperts) -> dict[str, Any]:
    if isinstance(module, QuantLinear):
        s = module.spec
        return {
            "kind": "linear",
            "in_features": s.in_features,
            "out_features": s.out_features,
            "bias": module.bias is not None,
            "bits": s.bits,
            "group_size": s.group_size,
            "axis": s.axis,
            "compute_dtype": dtype_name(module.compute_dtype),
        }
    s = module.gate_up_spec
    return {
        "kind": "experts",
        "num_experts": module.num_experts,
        "hidden_dim": module.hidden_dim,
        "intermediate_dim": module.intermediate_dim,
        "bits": s.bits,
        "group_size": s.group_size,
        "axis": s.axis,
        "compute_dtype": dtype_name(module.compute_dtype),
    }


def _config_dict(model: nn.Module) -> dict[str, Any]:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise QuantizationError(
            "only transformers models (with a .config) can be saved as quantized checkpoints"
        )
    return json.loads(config.to_json_string(use_diff=False))


def save_quantized(model: nn.Module, path: str | os.PathLike[str]) -> Path:
    """Write a quantized ``model`` (from :func:`quantize_model`) to the directory ``path``."""
    config: QuantConfig | None = getattr(model, "quant_config", None)
    modules = quantized_modules(model)
    if config is None or not modules:
        raise QuantizationError("the model is not quantized; call quantize_model() first")
    out_dir = Path(path)
    out_dir.mkdir(parents=True, exist_ok=True)

    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    canonical: dict[int, str] = {}
    for name, tensor, _ in _named_tensors(model):
        if tensor.device.type == "meta":
            raise QuantizationError(f"tensor {name} has no data (meta device); cannot save")
        key = id(tensor)
        if key in canonical:
            aliases[name] = canonical[key]
            continue
        canonical[key] = name
        tensors[name] = tensor.detach().to("cpu").contiguous()

    weights = out_dir / WEIGHTS_FILE
    tmp = out_dir / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT_NAME, "format_version": str(FORMAT_VERSION)})
    os.replace(tmp, weights)

    plan: QuantPlan | None = getattr(model, "quant_plan", None)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "quant_config": config.model_dump(mode="json"),
        "model_class": type(model).__name__,
        "model_config": _config_dict(model),
        "modules": {name: _module_entry(m) for name, m in modules.items()},
        "kept_high_precision": plan.kept if plan is not None else {},
        "tensors": {n: {"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for n, t in tensors.items()},
        "aliases": aliases,
        "weights_file": WEIGHTS_FILE,
        "weights_bytes": weights.stat().st_size,
        "weights_sha256": file_sha256(weights),
    }
    meta_tmp = out_dir / (META_FILE + ".tmp")
    meta_tmp.write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(meta_tmp, out_dir / META_FILE)
    log.info("saved quantized checkpoint to %s (%d bytes)", out_dir, meta["weights_bytes"])
    return out_dir


def read_checkpoint_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checkpoint's JSON, after checking the format name and version."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise QuantCheckpointError(f"{path}: not a quantized checkpoint ({META_FILE} is missing)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QuantCheckpointError(f"{meta_path}: corrupt checkpoint metadata: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise QuantCheckpointError(f"{meta_path}: not a {FORMAT_NAME} checkpoint")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise QuantCheckpointError(
            f"{meta_path}: checkpoint format version {version!r} is not supported (this build reads {FORMAT_VERSION});"
            " re-quantize the model"
        )
    for key in (
        "quant_config",
        "model_class",
        "model_config",
        "modules",
        "tensors",
        "aliases",
        "weights_sha256",
    ):
        if key not in meta:
            raise QuantCheckpointError(f"{meta_path}: checkpoint metadata lacks {key!r}")
    return meta


def _check_config(stored: dict[str, Any], expected: Any) -> None:
    if hasattr(expected, "to_json_string"):
        expected = json.loads(expected.to_json_string(use_diff=False))
    diffs = sorted(
        key
        for key in set(stored) | set(expected)
        if key not in _CONFIG_KEYS_IGNORED and stored.get(key) != expected.get(key)
    )
    if diffs:
        shown = ", ".join(
            f"{k}: checkpoint={stored.get(k)!r} expected={expected.get(k)!r}" for k in diffs[:5]
        )
        raise QuantCheckpointError(f"checkpoint was made for a different model config ({shown})")


def _build_config(model_config: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    data = dict(model_config)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise QuantCheckpointError("checkpoint model config has no model_type")
    try:
        return AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError) as exc:
        raise QuantCheckpointError(f"checkpoint model config cannot be rebuilt: {exc}") from exc


def _model_class(name: str) -> type[nn.Module]:
    import transformers

    # Only names exported by transformers are accepted: the JSON must not be able to import code.
    cls = getattr(transformers, name, None)
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise QuantCheckpointError(f"checkpoint names an unknown transformers model class {name!r}")
    return cls


def _build_skeleton(cls: type[nn.Module], config: Any) -> nn.Module:
    from transformers.initialization import no_init_weights

    # Every parameter and buffer lands on the meta device: shapes only, no storage.
    with torch.device("meta"), no_init_weights():
        builder = getattr(cls, "_from_config", None)
        return builder(config) if builder is not None else cls(config)


def _skeleton_module(entry: dict[str, Any], original: nn.Module, name: str) -> nn.Module:
    try:
        config = QuantConfig(bits=entry["bits"], group_size=entry["group_size"], axis=entry["axis"])
        dtype = dtype_from_name(entry["compute_dtype"])
        if entry["kind"] == "linear":
            if not isinstance(original, (nn.Linear, QuantLinear)):
                raise QuantCheckpointError(
                    f"checkpoint quantized {name} as a linear layer, the model has a {type(original).__name__}"
                )
            if (original.in_features, original.out_features) != (entry["in_features"], entry["out_features"]):
                raise QuantCheckpointError(
                    f"{name}: checkpoint has {entry['out_features']}x{entry['in_features']}, "
                    f"the model {original.out_features}x{original.in_features}"
                )
            return QuantLinear(
                entry["in_features"],
                entry["out_features"],
                bits=config.bits,
                group_size=config.group_size,
                axis=config.axis,
                bias=entry["bias"],
                compute_dtype=dtype,
                device="meta",
            )
        if entry["kind"] == "experts":
            if isinstance(original, QuantExperts):
                # Split precision: the module being replaced is already another quantized set.
                layer = QuantExperts(
                    original.num_experts,
                    original.hidden_dim,
                    original.intermediate_dim,
                    original.act_fn,
                    bits=config.bits,
                    group_size=config.group_size,
                    axis=config.axis,
                    compute_dtype=dtype,
                    device="meta",
                )
            else:
                layer = QuantExperts.skeleton_like(original, config, "meta")
                layer.compute_dtype = dtype
            if (layer.num_experts, layer.hidden_dim, layer.intermediate_dim) != (
                entry["num_experts"],
                entry["hidden_dim"],
                entry["intermediate_dim"],
            ):
                raise QuantCheckpointError(f"{name}: checkpoint experts shape differs from the model's")
            return layer
    except (KeyError, TypeError, ValueError, QuantizationError, AttributeError) as exc:
        if isinstance(exc, QuantCheckpointError):
            raise
        raise QuantCheckpointError(f"checkpoint entry for {name} is invalid: {exc}") from exc
    raise QuantCheckpointError(f"checkpoint entry for {name} has unknown kind {entry.get('kind')!r}")


def _assign(model: nn.Module, name: str, tensor: torch.Tensor, is_param: bool) -> torch.Tensor:
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    if is_param:
        old = owner._parameters[attr]
        # A tied alias gets the very same Parameter object, as transformers' own tying does.
        value: torch.Tensor = (
            tensor
            if isinstance(tensor, nn.Parameter)
            else nn.Parameter(tensor, requires_grad=bool(old is not None and old.requires_grad))
        )
        owner._parameters[attr] = value  # type: ignore[assignment]
    else:
        value = tensor
        owner._buffers[attr] = value
    return value


@torch.no_grad()
def load_quantized(
    path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    expected_config: Any = None,
    model_class: type[nn.Module] | None = None,
    verify: bool = True,
    backend: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> nn.Module:
    """Load a checkpoint written by :func:`save_quantized` into a ready-to-run model on ``device``.

    ``expected_config`` (a transformers config or dict) makes the load fail unless the checkpoint was
    made for that architecture. ``verify`` checks the weights file's size and SHA-256 first (reads
    the whole file once). ``backend`` overrides the saved ``QuantConfig.backend``; ``data_dir`` holds
    Gemlite's autotune cache. The returned model is in eval mode and carries ``quant_config``.
    """
    root = Path(path)
    meta = read_checkpoint_meta(root)
    weights = root / str(meta.get("weights_file", WEIGHTS_FILE))
    if not weights.is_file():
        raise QuantCheckpointError(f"{root}: weights file {weights.name} is missing")
    size = weights.stat().st_size
    if size != meta.get("weights_bytes"):
        raise QuantCheckpointError(
            f"{weights}: {size} bytes on disk, {meta.get('weights_bytes')} recorded; the file is truncated or was replaced"
        )
    if verify and file_sha256(weights) != meta["weights_sha256"]:
        raise QuantCheckpointError(f"{weights}: checksum mismatch; the checkpoint is corrupt")
    if expected_config is not None:
        _check_config(meta["model_config"], expected_config)

    try:
        quant_config = QuantConfig.model_validate(meta["quant_config"])
    except ValueError as exc:
        raise QuantCheckpointError(f"checkpoint quantization config is invalid: {exc}") from exc
    config = _build_config(meta["model_config"])
    cls = model_class or _model_class(str(meta["model_class"]))
    model = _build_skeleton(cls, config)

    for name, entry in meta["modules"].items():
        try:
            original = model.get_submodule(name)
        except AttributeError as exc:
            raise QuantCheckpointError(
                f"checkpoint quantized module {name}, which this model does not have"
            ) from exc
        _set_module(model, name, _skeleton_module(entry, original, name))

    aliases: dict[str, str] = meta["aliases"]
    recorded: dict[str, Any] = meta["tensors"]
    slots = {name: (tensor, is_param) for name, tensor, is_param in _named_tensors(model)}
    expected = set(slots) - set(aliases)
    missing = sorted(expected - set(recorded))
    unexpected = sorted(set(recorded) - expected)
    if missing or unexpected:
        raise QuantCheckpointError(
            f"{root}: checkpoint does not match the model: missing {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    loaded: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(weights), framework="pt", device=str(device)) as fh:
            stored = set(fh.keys())
            if stored != set(recorded):
                raise QuantCheckpointError(f"{weights}: tensor list differs from {META_FILE}")
            quant_names = set(meta["modules"])
            for name in sorted(expected):
                slot, is_param = slots[name]
                tensor = fh.get_tensor(name)
                # High-precision tensors keep the dtype they were saved in (a model cast to bf16
                # still says float32 in its config); quantized buffers must match exactly.
                dtype_ok = tensor.dtype == slot.dtype or (
                    name.rpartition(".")[0] not in quant_names
                    and tensor.is_floating_point()
                    and slot.is_floating_point()
                )
                if tuple(tensor.shape) != tuple(slot.shape) or not dtype_ok:
                    raise QuantCheckpointError(
                        f"{name}: checkpoint has {tensor.dtype} {tuple(tensor.shape)}, "
                        f"the model expects {slot.dtype} {tuple(slot.shape)}"
                    )
                loaded[name] = _assign(model, name, tensor, is_param)
    except SafetensorError as exc:
        raise QuantCheckpointError(f"{weights}: unreadable safetensors file: {exc}") from exc
    for alias, target in aliases.items():
        if alias not in slots or target not in loaded:
            raise QuantCheckpointError(f"checkpoint alias {alias} -> {target} does not match the model")
        _assign(model, alias, loaded[target], slots[alias][1])

    leftovers = [n for n, t, _ in _named_tensors(model) if t.device.type == "meta"]
    if leftovers:
        raise QuantCheckpointError(f"checkpoint left tensors without data: {leftovers[:5]}")
    model.eval()
    model.quant_config = quant_config  # type: ignore[assignment]
    model.quant_plan = QuantPlan(  # type: ignore[assignment]
        linears=[n for n, e in meta["modules"].items() if e.get("kind") == "linear"],
        experts=[n for n, e in meta["modules"].items() if e.get("kind") == "experts"],
        kept=dict(meta.get("kept_high_precision", {})),
    )
    from mediaindex.serving.quant.backends import apply_backend

    apply_backend(model, backend or quant_config.backend, data_dir=data_dir)  # type: ignore[arg-type]
    return model
