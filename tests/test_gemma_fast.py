"""EmbeddingGemma's fast path: converted once to int8 ONNX, it agrees with the sentence-transformers model, finds
English transcript lines from German queries, is converted again when its file is truncated or corrupted (shown on
a small random model of the same layout), and embeds without torch, transformers or sentence-transformers in the
process."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mediaindex.models.bundled import EMBEDDINGGEMMA, assembled_dir
from mediaindex.models.gemma_export import (
    FP32_MIN_COSINE,
    INT8_MIN_COSINE,
    MANIFEST,
    MODEL_FILE,
    conversion_dir,
    converted_model,
    verified_model,
)
from mediaindex.serving.digest import file_sha256
from tests.conftest import REPO, media


def _srt_lines(path: Path) -> list[str]:
    """The spoken text of a subtitle file, one cue per line."""
    cues = re.split(r"\n\s*\n", path.read_text(encoding="utf-8").strip())
    return [" ".join(cue.splitlines()[2:]).strip() for cue in cues if len(cue.splitlines()) > 2]


@pytest.fixture(scope="module")
def gemma_folder(cache_dir: Path) -> Path:
    folder = assembled_dir(EMBEDDINGGEMMA, cache_dir)
    if folder is None:
        pytest.skip("EmbeddingGemma is not assembled here (run `mediaindex models fetch embeddinggemma`)")
    pytest.importorskip("onnx", reason="the conversion needs onnx: pip install 'mediaindex[embeddinggemma]'")
    return folder


@pytest.fixture(scope="module")
def gemma_onnx(gemma_folder: Path, cache_dir: Path) -> object:
    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import load_text_embedder

    return load_text_embedder(EmbedSettings(model="embeddinggemma", backend="onnx"), cache_dir)


def _write_manifest(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).write_bytes(data)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    (folder / MANIFEST).write_text(json.dumps({"files": digests}))


def test_a_converted_file_is_accepted_only_with_its_recorded_digest(tmp_path: Path) -> None:
    data = media("images/skimage_coffee.png").read_bytes()
    _write_manifest(tmp_path, {MODEL_FILE: data})
    assert verified_model(tmp_path) == tmp_path / MODEL_FILE
    (tmp_path / MODEL_FILE).write_bytes(data[: len(data) // 2])  # a copy cut short
    assert verified_model(tmp_path) is None
    flipped = bytearray(data)
    flipped[len(flipped) // 3] ^= 0x10
    (tmp_path / MODEL_FILE).write_bytes(bytes(flipped))
    assert verified_model(tmp_path) is None
    (tmp_path / MODEL_FILE).unlink()
    assert verified_model(tmp_path) is None
    (tmp_path / MANIFEST).write_text("{not json")
    assert verified_model(tmp_path) is None
    _write_manifest(tmp_path, {"other.bin": data})  # a manifest that does not list the model
    assert verified_model(tmp_path) is None


def test_a_conversion_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    """A model folder (here a real but unconvertible one) whose conversion cannot be written says so and names
    the torch backend, never a raw OSError."""
    from mediaindex.errors import ModelLoadError

    folder = tmp_path / "embeddinggemma"
    folder.mkdir()
    (folder / ".assembled").write_text(hashlib.sha256(b"weights").hexdigest() + "\n")
    cache = tmp_path / "cache"
    cache.write_bytes(media("images/skimage_coffee.png").read_bytes())  # a file where the cache folder should be
    with pytest.raises(ModelLoadError, match=r"converting embeddinggemma .* failed .*embed\.backend: torch"):
        converted_model(folder, cache)


@pytest.mark.slow
def test_the_converted_model_agrees_with_sentence_transformers(gemma_onnx: object, cache_dir: Path,
                                                               gemma_folder: Path) -> None:
    pytest.importorskip("sentence_transformers")
    from mediaindex.config import EmbedSettings
    from mediaindex.models.gemma_onnx import GemmaOnnxEmbedder
    from mediaindex.models.text_embed import SentenceTransformerEmbedder, load_text_embedder

    assert isinstance(gemma_onnx, GemmaOnnxEmbedder) and gemma_onnx.name == "embeddinggemma"
    torch_model = load_text_embedder(EmbedSettings(model="embeddinggemma", backend="torch"), cache_dir)
    assert isinstance(torch_model, SentenceTransformerEmbedder)
    assert torch_model.name == gemma_onnx.name and torch_model.dim == gemma_onnx.dim == 768
    passages = _srt_lines(media("groundtruth/manifesto.srt"))[:24] + [
        "He began a confused complaint against the wizard, who had vanished behind the curtain on the left.",
        "The horizon seems extremely distant.",
    ]
    ours, theirs = gemma_onnx.embed_passages(passages), torch_model.embed_passages(passages)
    assert ours.shape == theirs.shape == (len(passages), 768)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)
    assert (ours * theirs).sum(axis=1).min() >= INT8_MIN_COSINE
    for query in ["Ein Gespenst geht um in Europa", "공산당 선언", "what is the wizard doing?"]:
        assert float(gemma_onnx.embed_query(query) @ torch_model.embed_query(query)) >= INT8_MIN_COSINE, query
    manifest = json.loads((conversion_dir(gemma_folder, cache_dir) / MANIFEST).read_text())
    assert manifest["precision"] == "int8" and manifest["cosine_min"] >= manifest["bound"] == INT8_MIN_COSINE


@pytest.mark.slow
def test_a_german_query_finds_the_english_line_of_the_same_meaning(gemma_onnx: object) -> None:
    from mediaindex.models.gemma_onnx import GemmaOnnxEmbedder

    assert isinstance(gemma_onnx, GemmaOnnxEmbedder)
    lines = _srt_lines(media("groundtruth/manifesto.srt"))[:12]
    vectors = gemma_onnx.embed_passages(lines)
    for query, want in [("Ein Gespenst geht um in Europa", "preamble a spectre is haunting europe"),
                        ("Proletarier aller Länder, vereinigt euch!", "workers of the world unite"),
                        ("Dieses Hörbuch ist gemeinfrei", "this audiobook is in the public domain")]:
        assert lines[int(np.argmax(vectors @ gemma_onnx.embed_query(query)))] == want, query
    # Passages embedded in one padded batch and one by one agree as closely as int8 agrees with torch (the
    # activations' int8 scale is taken per batch, so the batch shifts a vector slightly).
    alone = np.stack([gemma_onnx.embed_passages([line])[0] for line in lines[:4]])
    assert (alone * vectors[:4]).sum(axis=1).min() >= INT8_MIN_COSINE


@pytest.mark.slow
def test_odd_queries_make_unit_vectors(gemma_onnx: object) -> None:
    """Empty, blank, emoji-only and far-too-long text (cut at the model's 2048 tokens) all embed."""
    from mediaindex.models.gemma_onnx import GemmaOnnxEmbedder

    assert isinstance(gemma_onnx, GemmaOnnxEmbedder)
    long_text = " ".join(_srt_lines(media("groundtruth/manifesto.srt"))) * 40
    for text in ["", "   \n\t", "🦌🌲✈️", long_text]:
        vector = gemma_onnx.embed_query(text)
        assert vector.shape == (768,) and np.isfinite(vector).all() and abs(np.linalg.norm(vector) - 1) < 1e-3
    assert gemma_onnx.embed_passages([long_text, "a deer"]).shape == (2, 768)
    assert gemma_onnx.embed_passages([]).shape == (0, 768)


def test_the_tokenizer_read_from_its_sentencepiece_model_gives_the_ids_of_tokenizer_json(gemma_folder: Path,
                                                                                         tmp_path: Path) -> None:
    """What the converted model reads (`SentencePieceTokens`) is what it was converted and checked with
    (`tokenizer.json`): the same ids and masks for real subtitles in English, German and Korean with the prompts,
    odd text, and text cut at MAX_TOKENS; a marker such as "<eos>" written in a text stays text. A missing or
    damaged model file is a clear error."""
    from mediaindex.errors import ModelLoadError
    from mediaindex.models.gemma_export import (
        CHECK_SENTENCES,
        MAX_TOKENS,
        load_tokenizer,
        read_prompts,
        tokenize,
    )
    from mediaindex.models.gemma_onnx import SentencePieceTokens

    ours, theirs = SentencePieceTokens(gemma_folder / "tokenizer.model"), load_tokenizer(gemma_folder / "tokenizer.json")
    lines = _srt_lines(media("groundtruth/manifesto.srt"))
    for path in sorted((media("groundtruth").parent.parent / "media-val" / "groundtruth").glob("*.txt")):
        lines += path.read_text(encoding="utf-8").splitlines()  # transcripts in English, German and Korean
    prompts = read_prompts(gemma_folder)
    texts = [prompts.query + t for t in lines] + [prompts.document + t for t in lines] + list(CHECK_SENTENCES) + [
        "", "   \n\t", "🦌🌲✈️", "Straße ① ﬁ ｆｕｌｌ zero\u200bwidth e\u0301 \x00 \r\n", " ".join(lines) * 3]
    assert len(lines) > 60 and len(theirs.encode(texts[-1]).ids) == MAX_TOKENS
    for start in range(0, len(texts), 50):
        batch = texts[start:start + 50]
        got, want = ours(batch), tokenize(theirs, batch)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), batch
    ids, mask = ours(["a <eos> b"])
    assert mask.sum() == ids.shape[1] > 5 and list(ids[0]).count(1) == 1 and ids[0, -1] == 1
    (tmp_path / "damaged.model").write_bytes((gemma_folder / "tokenizer.model").read_bytes()[:1000])
    for path in (tmp_path / "damaged.model", tmp_path / "missing.model"):
        with pytest.raises(ModelLoadError, match=f"cannot read the tokenizer {re.escape(str(path))}"):
            SentencePieceTokens(path)


@pytest.mark.slow
def test_queries_embedded_at_once_are_each_query(gemma_onnx: object) -> None:
    """A query's words go through the graph in one padded batch; each row is that word's query vector."""
    from tests.test_embedders import _queries_at_once_are_each_query

    _queries_at_once_are_each_query(gemma_onnx)


@pytest.mark.slow
def test_one_copy_per_process_embeds_for_several_threads_at_once(gemma_onnx: object, cache_dir: Path) -> None:
    """Loaded again (by the next small job's embed stage, by a search beside it), the converted model is the copy
    already loaded; threads embedding on it at once each get their own text's vectors."""
    from concurrent.futures import ThreadPoolExecutor

    from mediaindex.config import EmbedSettings
    from mediaindex.models.text_embed import load_text_embedder

    assert load_text_embedder(EmbedSettings(model="embeddinggemma", backend="onnx"), cache_dir) is gemma_onnx
    queries = ["a dog running", "Wo ist der Bahnhof?", "앵무새", "pendulum swings back", "🦌"]
    passages = _srt_lines(media("groundtruth/manifesto.srt"))[:12]
    alone = {q: gemma_onnx.embed_query(q) for q in queries}  # type: ignore[attr-defined]
    batch = gemma_onnx.embed_passages(passages)  # type: ignore[attr-defined]

    texts = [None if i % 2 else queries[i // 2 % len(queries)] for i in range(20)]  # None: the passages

    def embed(query: str | None) -> np.ndarray:
        return gemma_onnx.embed_passages(passages) if query is None else gemma_onnx.embed_query(query)  # type: ignore[attr-defined]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(embed, texts))
    for query, vectors in zip(texts, got, strict=True):
        want = batch if query is None else alone[query]
        assert vectors.shape == want.shape and np.allclose(vectors, want, atol=1e-4), query


@pytest.fixture(scope="module")
def tiny_gemma_folder(gemma_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers EmbeddingGemma folder of the real layout and tokenizer (so token ids are real) but
    a small random Gemma3 encoder: its conversion runs the whole export, quantization and check in seconds."""
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3TextConfig, Gemma3TextModel

    folder = tmp_path_factory.mktemp("tiny") / "embeddinggemma"
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=262144, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                              layer_types=["sliding_attention", "full_attention"], sliding_window=512,
                              max_position_embeddings=2048, use_bidirectional_attention=True, pad_token_id=0,
                              bos_token_id=2, eos_token_id=1)
    Gemma3TextModel(config).save_pretrained(folder)
    for name in ("tokenizer.json", "config_sentence_transformers.json"):
        shutil.copy(gemma_folder / name, folder / name)
    for sub, (rows, cols) in (("2_Dense", (64, 32)), ("3_Dense", (32, 64))):
        (folder / sub).mkdir()
        save_file({"linear.weight": torch.randn(rows, cols) / cols**0.5}, str(folder / sub / "model.safetensors"))
    return folder


@pytest.mark.slow
def test_a_truncated_or_corrupted_conversion_is_converted_again(tiny_gemma_folder: Path, tmp_path: Path) -> None:
    """A conversion (of a small random Gemma3 of the real layout): one file cut short is refused by its digest;
    one with a flipped bit is refused and rebuilt (a full conversion: export, quantization, check)."""
    model = converted_model(tiny_gemma_folder, tmp_path)
    copy = conversion_dir(tiny_gemma_folder, tmp_path)
    assert model == copy / MODEL_FILE and verified_model(copy) == model
    whole = model.read_bytes()
    model.write_bytes(whole[: len(whole) - 4096])
    assert verified_model(copy) is None
    flipped = bytearray(whole)
    flipped[len(flipped) // 2] ^= 0x01
    model.write_bytes(bytes(flipped))
    assert verified_model(copy) is None
    rebuilt = converted_model(tiny_gemma_folder, tmp_path)
    assert rebuilt == model and verified_model(copy) == model
    manifest = json.loads((copy / MANIFEST).read_text())
    # int8 is kept only when it agrees with torch to INT8_MIN_COSINE, else the fp32 export to FP32_MIN_COSINE.
    bound = {"int8": INT8_MIN_COSINE, "fp32": FP32_MIN_COSINE}[manifest["precision"]]
    assert manifest["bound"] == bound and manifest["cosine_min"] >= bound
    assert manifest["source_sha256"] == file_sha256(tiny_gemma_folder / "model.safetensors")


_EMBED_WITHOUT_TORCH = """
import json, sys
from pathlib import Path
from mediaindex.config import EmbedSettings
from mediaindex.models.text_embed import load_text_embedder
embedder = load_text_embedder(EmbedSettings(model="embeddinggemma", backend="onnx"), Path(sys.argv[1]))
vector = embedder.embed_query("Wo ist der Bahnhof?")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "sentence_transformers"))
print(json.dumps({"heavy": heavy, "dim": int(vector.shape[0]), "name": embedder.name}))
"""


@pytest.mark.slow
@pytest.mark.beside  # waits on the process it runs
def test_embedding_a_query_loads_no_torch_transformers_or_sentence_transformers(gemma_folder: Path,
                                                                                cache_dir: Path) -> None:
    converted_model(gemma_folder, cache_dir)  # converting imports torch; the process below only loads the file
    done = subprocess.run([sys.executable, "-c", _EMBED_WITHOUT_TORCH, str(cache_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"heavy": [], "dim": 768, "name": "embeddinggemma"}


def test_default_embedder_is_embeddinggemma(monkeypatch: pytest.MonkeyPatch) -> None:
    from mediaindex.config import EmbedSettings, load_settings

    monkeypatch.delenv("MEDIAINDEX_EMBED__MODEL", raising=False)
    assert EmbedSettings().model == "embeddinggemma" and EmbedSettings().backend == "onnx"
    assert load_settings("cpu").embed.model == load_settings("gpu").embed.model == "embeddinggemma"


@pytest.mark.slow
@pytest.mark.beside  # waits on the `mediaindex` processes it runs
def test_default_embedder_indexes_and_finds_a_moment(gemma_folder: Path, cache_dir: Path, tmp_path: Path) -> None:
    from tests.conftest import cli_environment

    env = cli_environment(tmp_path / "index", cache_dir, tmp_path / "t")
    env.pop("MEDIAINDEX_EMBED__MODEL", None)  # the profile's own embedder

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=600)

    done = run("ingest", str(media("audio/jfk.flac")))
    assert done.returncode == 0, done.stderr
    schema = json.loads((tmp_path / "index" / "schema.json").read_text(encoding="utf-8"))
    assert "embeddinggemma" in json.dumps(schema)
    # German, over English speech: found by meaning, surely.
    found = run("search", "Fragt, was ihr für euer Land tun könnt", "--json", "--limit", "3")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits and Path(hits[0]["source"]).name == "jfk.flac" and hits[0]["band"] in ("high", "medium")
    absent = run("search", "how to bake sourdough bread", "--json")
    assert absent.returncode == 0 and json.loads(absent.stdout) == []
