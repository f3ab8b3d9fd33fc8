"""The project's C kernels: built once with the system C compiler, loaded through ctypes.

A shared library is compiled at first use (about a second) into ``$MEDIAINDEX_CACHE_DIR/kernels`` (else the
per-user cache), named by a hash of the source, the flags, the compiler and the CPU (``-march=native``), so a
source change or another machine gets its own build. When no compiler is found or the build fails,
:func:`load_library` returns None with the reason, and the caller keeps its PyTorch path.
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

log = logging.getLogger(__name__)

FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")


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


def _build(compiler: str, source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so concurrent first uses never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([compiler, *FLAGS, str(source), "-o", tmp], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip()[-2000:] or f"{compiler} exited with {proc.returncode}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def load_library(source: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """The compiled ``source`` (a C file beside this module), or None and why it cannot be used."""
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler (cc, gcc or clang, or $CC) is on PATH"
    key = hashlib.sha256(
        source.read_bytes() + " ".join(FLAGS).encode() + compiler.encode() + _cpu_signature().encode()
    ).hexdigest()[:16]
    target = kernel_dir() / f"{source.stem}-{key}.so"
    try:
        if not target.is_file():
            _build(compiler, source, target)
            log.info("built the CPU kernel %s", target)
        return ctypes.CDLL(str(target)), None
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return None, f"building the CPU kernel {source.name} failed: {exc}"
