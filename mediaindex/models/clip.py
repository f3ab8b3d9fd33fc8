"""A shared text-image space from a CLIP-family model (transformers CLIPModel, SiglipModel, ...).

No such weights ship on PyPI, so the backend is used only when `vision.clip` names a local
directory or a hub id. Frames and queries are embedded into one space and L2-normalised.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.images import check_image

if TYPE_CHECKING:
    import torch


def _resolve(name: str) -> str:
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"CLIP model directory {path} has no config.json (not a transformers model)")
        return str(path)
    if name.startswith((".", "/", "~")):
        raise ModelLoadError(f"CLIP model path {name} does not exist")
    return name  # a hub id: loading it needs the hub or its local cache


def _embed_dim(config) -> int:
    # CLIP projects both towers to `projection_dim`; SigLIP compares the towers' hidden states.
    dim = getattr(config, "projection_dim", None)
    if dim is None:
        vision = getattr(config, "vision_config", None)
        dim = getattr(vision, "hidden_size", None)
    if not dim:
        raise ModelLoadError(f"cannot tell the embedding size of a {type(config).__name__} model")
    return int(dim)


def clip_dim(name: str) -> int:
    """The embedding size from the model's config alone (the weights are not loaded)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(_resolve(name))
    except ModelLoadError:
        raise
    except Exception as exc:  # transformers raises OSError/ValueError/KeyError variants
        raise ModelLoadError(f"cannot read the config of CLIP model {name!r}: {exc}") from exc
    return _embed_dim(config)


def quantize_towers(model: torch.nn.Module, bits: int, group_size: int) -> torch.nn.Module:
    """Both towers' linear layers (attention, MLP, projections) in HQQ through the serving engine's code: one
    quantization module and one set of kernels (Gemlite on CUDA) for every stage that runs transformer weights.
    Embeddings and norms stay as loaded."""
    from mediaindex.serving.quant import QuantConfig, quantize_model
    from mediaindex.serving.quant.config import QuantizationError

    try:
        return quantize_model(model, QuantConfig.parse(bits=bits, group_size=group_size))
    except QuantizationError as exc:
        raise ModelLoadError(f"cannot quantize the CLIP model to {bits}-bit: {exc}") from exc


def _as_tensor(output: Any) -> torch.Tensor:
    # transformers 5 returns model outputs whose pooler_output is the projected embedding; 4.x a tensor.
    return output if not hasattr(output, "pooler_output") else output.pooler_output


class ClipEmbedder:
    def __init__(self, name: str, device: str = "cpu", batch_size: int = 16, bits: int | None = None,
                 group_size: int = 64) -> None:
        import torch
        from transformers import AutoModel, AutoProcessor

        from mediaindex.models.classifier import _device

        source = _resolve(name)
        try:
            model = AutoModel.from_pretrained(source)
            self.processor = AutoProcessor.from_pretrained(source)
        except Exception as exc:
            raise ModelLoadError(f"cannot load CLIP model {name!r}: {exc}") from exc
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise ModelLoadError(f"{name!r} is a {type(model).__name__}, not a text-image model like CLIP or SigLIP")
        self.device = _device(device)
        self.model = model.eval().to(self.device)
        if bits is not None:
            self.model = quantize_towers(self.model, bits, group_size)
        self.name = name
        self.dim = _embed_dim(model.config)
        self.batch_size = batch_size
        # SigLIP's text tower was trained on text padded to a fixed length.
        self._pad = "max_length" if "siglip" in type(model).__name__.lower() else True
        # The text tower's own length: a tokenizer saved without model_max_length would not truncate to it.
        self._max_tokens = getattr(getattr(model.config, "text_config", None), "max_position_embeddings", None)
        self._torch = torch

    def embed_images(self, images: list[np.ndarray]) -> np.ndarray:
        torch = self._torch
        chunks = []
        for i in range(0, len(images), self.batch_size):
            batch = [check_image(im) for im in images[i : i + self.batch_size]]
            inputs = self.processor(images=batch, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                feats = _as_tensor(self.model.get_image_features(pixel_values=inputs["pixel_values"]))
            chunks.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu().numpy())
        return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, self.dim), np.float32)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        inputs = self.processor(text=texts, return_tensors="pt", padding=self._pad, truncation=True,
                                max_length=self._max_tokens).to(self.device)
        with torch.inference_mode():
            feats = _as_tensor(self.model.get_text_features(
                **{k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}))
        return torch.nn.functional.normalize(feats.float(), dim=-1).cpu().numpy().astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_texts([text])[0]
