"""The KV handoff from a prefill worker to a decode worker: a request's prompt K/V, its first token, a checksum.

Wire form (`KVHandoff`): one contiguous uint8 buffer holding every layer's K and V for the prompt tokens
([T, kv_heads, D] each, in the wire dtype), and a small header saying what the buffer holds: request, prompt ids,
first token, sampling settings, model type, KV layout, and each tensor's name, dtype, shape and offset. The checksum
covers the header and the buffer, so a changed byte anywhere (K/V, prompt, first token, layout) is caught. The
buffer is a numpy array so Ray passes it through its object store without pickling or copying it.

The handoff carries what the engine's pages hold (see `KVLayout`): for DeepSeek-V3 MLA the KV latent and the rotary
key of each token (its "K" and "V" parts), not per-head K/V.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from mediaindex.serving.errors import KVHandoffError
from mediaindex.serving.kv_cache import FP8_MAX, KVLayout, fp8_bytes_to_float, quantize_fp8
from mediaindex.serving.sampling import SamplingParams

WireDType = Literal["fp32", "bf16", "fp8_e4m3"]
_WIRE_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "uint8": torch.uint8}
_ALIGN = 64  # every tensor starts on a 64-byte boundary, so typed views of the buffer are aligned

# xxh3 is several times faster than blake2b; the algorithm is named in the handoff, so both ends agree.
DEFAULT_ALGORITHM = "xxh3_128" if importlib.util.find_spec("xxhash") else "blake2b"


def _digest(algorithm: str, header: bytes, data: np.ndarray) -> str:
    if algorithm == "xxh3_128" and importlib.util.find_spec("xxhash"):
        import xxhash

        h = xxhash.xxh3_128()
    elif algorithm == "blake2b":
        h = hashlib.blake2b(digest_size=16)
    else:
        raise LookupError(algorithm)
    h.update(len(header).to_bytes(8, "little"))  # the boundary between header and data is part of what is hashed
    h.update(header)
    # numpy's stubs declare ndarray's buffer protocol for Python >= 3.12 only; the checker targets 3.11.
    h.update(memoryview(np.ascontiguousarray(data)).cast("B"))  # type: ignore[arg-type]
    return h.hexdigest()


@dataclass
class PrefilledRequest:
    """A request whose prompt was computed elsewhere, as the decode engine takes it (`LLMEngine.add_prefilled`)."""

    request_id: str
    prompt_ids: list[int]
    first_token: int
    params: SamplingParams
    k: list[torch.Tensor]  # per layer [T, kv_heads, Dk]
    v: list[torch.Tensor]  # per layer [T, kv_heads, Dv]
    generator_state: torch.Tensor | None = None  # the seeded sampler's state after the first token
    prompt_logprobs: list[float] | None = None
    prompt_argmax: list[int] | None = None


@dataclass
class KVHandoff:
    request_id: str
    prompt_ids: list[int]
    first_token: int
    params: SamplingParams
    model_type: str
    layout: KVLayout
    wire_dtype: WireDType
    tensors: list[tuple[str, str, list[int], int]]  # (name, dtype, shape, byte offset in data)
    data: np.ndarray  # uint8, every tensor of `tensors`
    generator_state: bytes | None = None
    prompt_logprobs: list[float] | None = None
    prompt_argmax: list[int] | None = None
    algorithm: str = DEFAULT_ALGORITHM
    checksum: str = ""

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def header_bytes(self) -> bytes:
        """Everything but the buffer and the checksum, canonically encoded."""
        header = {
            "request_id": self.request_id,
            "prompt_ids": self.prompt_ids,
            "first_token": self.first_token,
            "params": dataclasses.asdict(self.params),
            "model_type": self.model_type,
            "layout": dataclasses.astuple(self.layout),
            "wire_dtype": self.wire_dtype,
            "tensors": self.tensors,
            "nbytes": self.nbytes,
            "generator_state": self.generator_state.hex() if self.generator_state is not None else None,
            "prompt_logprobs": self.prompt_logprobs,
            "prompt_argmax": self.prompt_argmax,
            "algorithm": self.algorithm,
        }
        return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()

    def compute_checksum(self) -> str:
        try:
            return _digest(self.algorithm, self.header_bytes(), self.data)
        except LookupError:
            raise KVHandoffError(
                self.request_id, f"its checksum algorithm {self.algorithm!r} is not available on this worker"
            ) from None

    def verify(self) -> None:
        """Raise KVHandoffError unless the header and the bytes are exactly what the prefill worker sent."""
        found = self.compute_checksum()
        if found != self.checksum:
            raise KVHandoffError(
                self.request_id,
                f"checksum mismatch ({self.algorithm}: sent {self.checksum}, received data hashes to {found}); "
                "its KV data or metadata changed on the way",
            )

    def check_compatible(self, model_type: str, layout: KVLayout, vocab_size: int) -> None:
        """Raise KVHandoffError unless this handoff was made for a model with the receiver's KV layout."""
        if layout != self.layout or model_type != self.model_type:
            raise KVHandoffError(
                self.request_id,
                f"it was made for a {self.model_type!r} model with {_describe(self.layout)}, but this decode worker "
                f"runs a {model_type!r} model with {_describe(layout)}",
            )
        bad = [t for t in [*self.prompt_ids, self.first_token] if not 0 <= t < vocab_size]
        if bad:
            raise KVHandoffError(self.request_id, f"token ids out of this model's vocabulary [0, {vocab_size}): {bad[:5]}")

    def unpack(self) -> PrefilledRequest:
        """The K/V as tensors (dequantised to float32 for an FP8 wire), with the request's state."""
        views = self._views()
        n_layers = self.layout.num_layers
        k = [views[f"k{i}"] for i in range(n_layers)]
        v = [views[f"v{i}"] for i in range(n_layers)]
        if self.wire_dtype == "fp8_e4m3":
            ks, vs = views["k_scale"], views["v_scale"]
            k = [fp8_bytes_to_float(t, torch.float32) * ks[i][:, None] for i, t in enumerate(k)]
            v = [fp8_bytes_to_float(t, torch.float32) * vs[i][:, None] for i, t in enumerate(v)]
        state = None
        if self.generator_state is not None:
            state = torch.frombuffer(bytearray(self.generator_state), dtype=torch.uint8)
        return PrefilledRequest(
            self.request_id, list(self.prompt_ids), self.first_token, self.params, k, v, state,
            self.prompt_logprobs, self.prompt_argmax,
        )

    def _views(self) -> dict[str, torch.Tensor]:
        """Typed views into the buffer, after checking the table matches the layout and fits the buffer."""
        lay, n = self.layout, len(self.prompt_ids)
        kind = "uint8" if self.wire_dtype == "fp8_e4m3" else str(_WIRE_TORCH[self.wire_dtype]).removeprefix("torch.")
        expected = {}
        for i in range(lay.num_layers):
            expected[f"k{i}"] = (kind, [n, lay.num_kv_heads, lay.k_head_dim])
            expected[f"v{i}"] = (kind, [n, lay.num_kv_heads, lay.v_head_dim])
        if self.wire_dtype == "fp8_e4m3":
            expected["k_scale"] = expected["v_scale"] = ("float32", [lay.num_layers, lay.num_kv_heads])
        found = {name: (dtype, list(shape)) for name, dtype, shape, _ in self.tensors}
        if found != expected or len(found) != len(self.tensors):
            raise KVHandoffError(self.request_id, "its tensor table does not match its own KV layout and prompt length")
        raw = torch.from_numpy(self.data) if self.data.flags.writeable else _readonly_tensor(self.data)
        views = {}
        for name, dtype, shape, offset in self.tensors:
            size = math.prod(shape) * torch.empty(0, dtype=_DTYPES[dtype]).element_size()
            if offset < 0 or offset % _ALIGN or offset + size > raw.numel():
                raise KVHandoffError(self.request_id, f"tensor {name} lies outside its buffer")
            views[name] = raw[offset : offset + size].view(_DTYPES[dtype]).view(shape)
        return views

    def flip_byte(self, index: int = 0) -> None:
        """Fault injection: change one byte of the K/V buffer after the checksum was taken."""
        self.data = np.array(self.data, copy=True)
        self.data[index % self.data.size] ^= 0xFF


def _readonly_tensor(data: np.ndarray) -> torch.Tensor:
    # A buffer from Ray's object store is read-only. The views made from it are only read (the engine copies them
    # into its pages), so torch's warning about non-writable arrays does not apply.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(data)


def _describe(layout: KVLayout) -> str:
    return (
        f"{layout.num_layers} layers x {layout.num_kv_heads} KV heads, K head dim {layout.k_head_dim}, "
        f"V head dim {layout.v_head_dim}"
    )


def pack_handoff(
    request: PrefilledRequest, model_type: str, layout: KVLayout, wire_dtype: WireDType,
    algorithm: str = DEFAULT_ALGORITHM,
) -> KVHandoff:
    """Lay out the request's K/V (on any device) in one buffer in `wire_dtype` and checksum it.

    An FP8 wire uses one scale per (layer, KV head) for K and one for V, from this request's own amax."""
    tensors: list[tuple[str, torch.Tensor]] = []
    if wire_dtype == "fp8_e4m3":
        tiny = torch.finfo(torch.float32).tiny
        k_scale = torch.stack([t.abs().float().amax(dim=(0, 2)) / FP8_MAX for t in request.k]).clamp_min(tiny)
        v_scale = torch.stack([t.abs().float().amax(dim=(0, 2)) / FP8_MAX for t in request.v]).clamp_min(tiny)
        for i, (k, v) in enumerate(zip(request.k, request.v, strict=True)):
            tensors += [(f"k{i}", quantize_fp8(k, k_scale[i])), (f"v{i}", quantize_fp8(v, v_scale[i]))]
        tensors += [("k_scale", k_scale), ("v_scale", v_scale)]
    else:
        dtype = _WIRE_TORCH[wire_dtype]
        for i, (k, v) in enumerate(zip(request.k, request.v, strict=True)):
            tensors += [(f"k{i}", k.to(dtype)), (f"v{i}", v.to(dtype))]
    table: list[tuple[str, str, list[int], int]] = []
    offset = 0
    for name, t in tensors:
        offset = -(-offset // _ALIGN) * _ALIGN
        table.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), offset))
        offset += t.numel() * t.element_size()
    buf = torch.zeros(offset, dtype=torch.uint8)
    for (_, _, _, start), (_, t) in zip(table, tensors, strict=True):
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).cpu()
        buf[start : start + raw.numel()] = raw
    state = request.generator_state
    handoff = KVHandoff(
        request_id=request.request_id,
        prompt_ids=list(request.prompt_ids),
        first_token=int(request.first_token),
        params=request.params,
        model_type=model_type,
        layout=layout,
        wire_dtype=wire_dtype,
        tensors=table,
        data=buf.numpy(),
        generator_state=bytes(state.cpu().numpy().tobytes()) if state is not None else None,
        prompt_logprobs=request.prompt_logprobs,
        prompt_argmax=request.prompt_argmax,
        algorithm=algorithm,
    )
    handoff.checksum = handoff.compute_checksum()
    return handoff
