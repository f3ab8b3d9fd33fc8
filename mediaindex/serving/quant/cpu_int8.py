"""Int8 weights computed by torch's packed int8 CPU matmul, for decoding on a CPU.

HQQ's PyTorch path dequantizes every weight on every call, which on a CPU costs more than the matmul itself.
Here each ``nn.Linear`` is quantized once, per output channel and symmetric (int8 codes, one bf16 scale a row),
and every call runs ``torch._weight_int8pack_mm`` (the int8 weight-only kernel torchao and gpt-fast use on CPU)
on bf16 activations: the weights are read as int8, a quarter of fp32's bytes, and never expanded. With 8-bit
activations (:meth:`Int8Linear.use_batched_kernel`), calls of up to ``BATCHED_ROWS`` rows run the project's own
kernel instead (:mod:`cpu_batched`), which reads each weight once for all rows of a decode batch. Prompt chunks
(many rows at once) go through bf16's dense matmul instead: on the original bf16 weight where the layer keeps it
(``keep_dense``, the split of prefill and decode precision), else on the weight expanded for that call.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mediaindex.serving.quant import cpu_batched
from mediaindex.serving.quant.config import QuantizationError

SKIP = ("lm_head",)  # the output head stays as it is: its error lands directly on the logits
# The kernel's time grows with the rows it is given, bf16's dense matmul (AMX) barely does: from DENSE_ROWS rows on
# (a decode batch of 8 sequences, a prompt chunk) a kept bf16 weight is faster; from EXPAND_ROWS on, even a weight
# expanded for the call is.
DENSE_ROWS = 8
EXPAND_ROWS = 32
# With 8-bit activations, calls of up to this many rows (decode batches) run the batched kernel (cpu_batched), which
# reads each weight once for all rows; longer prompt chunks are faster on bf16's dense matmul.
BATCHED_ROWS = 32


ALIGNMENT = 64  # bytes: the packed kernels' vector loads crash on codes that start off such a boundary


def aligned(t: Tensor) -> Tensor:
    """``t`` contiguous and starting on a 64-byte boundary (tensors read from a file at some offset may not)."""
    t = t.contiguous()
    return t if t.data_ptr() % ALIGNMENT == 0 else t.clone()


def int8_kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


class Int8Linear(nn.Module):
    """Drop-in for ``nn.Linear`` (CPU): int8 codes ``[out, in]``, bf16 scales ``[out]``, optional bias."""

    # Registered buffers, declared so they type as tensors (nn.Module.__getattr__ says Tensor | Module).
    codes: Tensor
    scales: Tensor

    def __init__(self, codes: Tensor, scales: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        if codes.dtype != torch.int8 or codes.dim() != 2 or tuple(scales.shape) != (codes.shape[0],):
            raise QuantizationError(f"int8 linear needs int8 codes [out, in] and scales [out], got "
                                    f"{codes.dtype} {tuple(codes.shape)} and {tuple(scales.shape)}")
        self.out_features, self.in_features = codes.shape
        self.register_buffer("codes", aligned(codes))
        self.register_buffer("scales", aligned(scales.to(torch.bfloat16)))
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
        self.dense: Tensor | None = None  # kept out of state_dict: it is the loaded model's own weight
        self.batched: tuple[Tensor, Tensor] | None = None  # the batched kernel's layout, when in use

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        codes = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(codes, scale, linear.bias)

    def dequantize(self) -> Tensor:
        """The bf16 weight ``[out, in]`` the kernel computes with."""
        return (self.codes.float() * self.scales.float()[:, None]).to(torch.bfloat16)

    def keep_dense(self, weight: Tensor | None) -> None:
        """Run prompt chunks on this bf16 weight (the layer's original); None drops it."""
        if weight is not None and tuple(weight.shape) != (self.out_features, self.in_features):
            raise QuantizationError(f"dense weight {tuple(weight.shape)} does not match {self.extra_repr()}")
        self.dense = None if weight is None else weight.detach().to(torch.bfloat16)

    def use_batched_kernel(self) -> str | None:
        """Run decode batches on the batched kernel with 8-bit activations; returns why not, or None."""
        reason = cpu_batched.unavailable() or cpu_batched.unsupported(self.out_features, self.in_features, None)
        if reason is None:
            self.batched = cpu_batched.int8_layout(self.codes, self.scales)
        return reason

    def set_batched(self, codes: Tensor, scales: Tensor) -> None:
        """Use a batched-kernel layout made earlier by :meth:`use_batched_kernel` (read back from a cache)."""
        if (codes.dtype, codes.numel(), scales.numel()) != (torch.uint8, self.out_features * self.in_features,
                                                            self.out_features):
            raise QuantizationError(f"batched layout {tuple(codes.shape)}, {tuple(scales.shape)} does not fit "
                                    f"{self.extra_repr()}")
        self.batched = (aligned(codes), aligned(scales))

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
        rows = flat.shape[0]
        if self.batched is not None and rows <= BATCHED_ROWS:
            out = cpu_batched.batched_matmul(flat, *self.batched, self.out_features, 8).to(torch.bfloat16)
        elif rows >= DENSE_ROWS and self.dense is not None:
            out = torch.nn.functional.linear(flat, self.dense)
        elif rows >= EXPAND_ROWS:
            out = torch.nn.functional.linear(flat, self.dequantize())
        else:
            out = torch._weight_int8pack_mm(flat, self.codes, self.scales)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per channel"


def quantize_int8_cpu(model: nn.Module, skip: tuple[str, ...] = SKIP) -> int:
    """Replace every ``nn.Linear`` of a CPU model (but ``skip``) by an Int8Linear; returns how many."""
    if not int8_kernel_available():
        raise QuantizationError("this torch build has no packed int8 CPU matmul (aten::_weight_int8pack_mm)")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise QuantizationError("int8 CPU weights need the model on the CPU")
    targets = [(name, m) for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and not any(name.split(".")[-1] == s for s in skip)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Int8Linear.from_linear(linear))
    return len(targets)
