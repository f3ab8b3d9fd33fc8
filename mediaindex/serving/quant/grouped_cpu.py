"""The CPU grouped-experts kernel (``grouped_experts.c``): build once with the system C compiler, call through ctypes.

torch has no CPU matmul that reads several experts' low-bit weights in one call (``grouped_mm`` takes float
weights only, the int8/int4 weight-only kernels take one matrix per call), so a MoE layer would need a Python
loop over experts, dequantizing each. The C kernel takes the HQQ buffers as they are and runs one projection of
all experts per call, dequantizing one 16-row tile at a time into a per-thread panel that stays in cache.

The shared library is compiled at first use (about a second) into ``$MEDIAINDEX_CACHE_DIR/kernels`` (else the
per-user cache), named by a hash of the source, the flags and the CPU (``-march=native``), so a source change or
another machine gets its own build. When no compiler is found or the build fails, :func:`load_kernel` returns
None with the reason, and the layer keeps the PyTorch path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("grouped_experts.c")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")
LANES = 16  # the kernel's vector width in floats: K and the group size must be multiples of it
# How the kernel rounds dequantized weights, so its products equal the PyTorch path's in that dtype.
_ROUND = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def kernel_dir() -> Path:
    base = os.environ.get("MEDIAINDEX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "mediaindex"
    )
    return Path(base).expanduser() / "kernels"


def _cpu_signature() -> str:
    # -march=native code is only valid on the CPU it was built for.
    try:
        flags = next(
            (line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), ""
        )
    except OSError:
        flags = ""
    return f"{platform.machine()}|{platform.processor()}|{flags}"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _build(compiler: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so concurrent first uses never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip()[-2000:] or f"{compiler} exited with {proc.returncode}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler (cc, gcc or clang, or $CC) is on PATH"
    key = hashlib.sha256(
        SOURCE.read_bytes() + " ".join(FLAGS).encode() + compiler.encode() + _cpu_signature().encode()
    ).hexdigest()[:16]
    target = kernel_dir() / f"grouped_experts-{key}.so"
    try:
        if not target.is_file():
            _build(compiler, target)
            log.info("built the CPU grouped-experts kernel %s", target)
        lib = ctypes.CDLL(str(target))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return None, f"building the CPU grouped-experts kernel failed: {exc}"
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.mi_grouped_matmul.argtypes = [p, i64, p, p, p, p, i64, i64, i64, i64, i32, i32, p, i32]
    lib.mi_grouped_matmul_bf16.argtypes = [p, i64, p, p, p, p, i64, i64, i64, i64, i32, p, i32]
    lib.mi_grouped_matmul.restype = lib.mi_grouped_matmul_bf16.restype = lib.mi_has_bf16_dot.restype = i32
    return lib, None


def load_kernel() -> tuple[ctypes.CDLL | None, str | None]:
    """The loaded kernel library, or None and why it cannot be used."""
    return _load()


def unsupported(in_features: int, group_size: int, axis: int, dtype: torch.dtype) -> str | None:
    """Why the kernel cannot run a projection with these settings, or None if it can."""
    if axis != 1:
        return "the kernel reads HQQ's axis=1 layout only"
    if in_features % LANES or group_size % LANES:
        return f"in_features ({in_features}) and group_size ({group_size}) must be multiples of {LANES}"
    if dtype not in _ROUND:
        return f"compute dtype {dtype} is not float32, bfloat16 or float16"
    return None


def grouped_matmul(
    x: Tensor,
    ends: Tensor,
    codes: Tensor,
    scale: Tensor,
    zero: Tensor,
    *,
    out_features: int,
    group_size: int,
    bits: int,
    compute_dtype: torch.dtype,
) -> Tensor:
    """``y[r] = x[r] @ W_e.T`` for the rows ``r`` of each expert ``e``: rows ``[ends[e-1], ends[e])``.

    ``x`` [rows, in] in the compute dtype, sorted by expert; ``ends`` int64 [E], cumulative;
    ``codes``/``scale``/``zero`` the layer's stacked HQQ buffers. Returns fp32 [rows, out] (sums in fp32);
    rows past ``ends[-1]`` are zero.
    """
    lib, reason = load_kernel()
    if lib is None:
        raise RuntimeError(reason)
    if codes.dtype != torch.uint8 or scale.dtype != torch.float16 or zero.dtype != torch.float16:
        raise ValueError("the kernel reads uint8 codes with float16 scales and zeros (HQQ's buffers as stored)")
    if ends.dtype != torch.int64 or ends.shape != (codes.shape[0],):
        raise ValueError(f"ends must be int64 with one entry per expert ({codes.shape[0]}), not {ends.dtype} {tuple(ends.shape)}")
    rows, in_features = x.shape
    ends, codes, scale, zero = (t.contiguous() for t in (ends, codes, scale, zero))
    out = torch.empty(rows, out_features, dtype=torch.float32)
    weights = (ends.data_ptr(), codes.data_ptr(), scale.data_ptr(), zero.data_ptr(), codes.shape[0])
    shape = (out_features, in_features, group_size, bits)
    if compute_dtype == torch.bfloat16 and lib.mi_has_bf16_dot() and not (in_features % 32 or group_size % 32):
        # bf16 products summed in fp32 by the CPU's bf16 dot instruction (AVX512-BF16).
        x = x.to(torch.bfloat16).contiguous()
        status = lib.mi_grouped_matmul_bf16(
            x.data_ptr(), rows, *weights, *shape, out.data_ptr(), torch.get_num_threads()
        )
    else:
        x = x.float().contiguous()
        status = lib.mi_grouped_matmul(
            x.data_ptr(), rows, *weights, *shape, _ROUND[compute_dtype], out.data_ptr(), torch.get_num_threads()
        )
    if status != 0:
        raise RuntimeError(f"the CPU grouped-experts kernel refused its arguments (status {status})")
    return out
