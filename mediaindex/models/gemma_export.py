"""EmbeddingGemma converted once into an int8 ONNX file, so queries and passages are embedded with onnxruntime
and `tokenizers` alone (no torch, transformers or sentence-transformers in the process).

The whole sentence-transformers pipeline is exported as one graph: the Gemma3 encoder, mean pooling over the
attention mask, the two Dense layers and L2 normalisation. Its MatMul and Gather (token embedding) weights are
then quantized to int8 per channel (onnxruntime's dynamic quantization), except the MLP down projections. Before it is kept, the file is checked against the
torch model on fixed English, German and Korean queries and passages; if int8 agrees less than `INT8_MIN_COSINE`
the fp32 export is kept instead, and if that disagrees too the conversion fails.

The result lives in the model cache under a folder named by the source weights' digest and `CONVERSION_VERSION`,
written in a staging folder and renamed into place, with each file's SHA-256 in `conversion.json`; a file whose
digest differs on load (truncated, corrupted) is converted again, never loaded (a file unchanged since its last check
is not read again: `serving.digest`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.serving.digest import file_sha256, has_sha256

log = logging.getLogger(__name__)

# Raised when the exported graph or its quantization changes, so older conversions are not reused.
CONVERSION_VERSION = 1
MANIFEST = "conversion.json"
MODEL_FILE = "model.onnx"
# The int8 file's agreement with torch fp32 on the check sentences is recorded in its conversion.json and in
# benchmarks/README.md; below this bound rankings change visibly, so the fp32 export is kept instead.
INT8_MIN_COSINE = 0.98
# The fp32 export computes the same function as torch; anything below this is a broken export.
FP32_MIN_COSINE = 0.999
MAX_TOKENS = 2048  # sentence-transformers' max_seq_length for this model

# The conversion is checked on these, each as a query (query prompt) and as a passage (document prompt).
CHECK_SENTENCES = (
    "How do I get to the train station from here?",
    "The committee approved the new budget after a long debate on Tuesday.",
    "A deer is standing at the edge of the forest in the early morning fog.",
    "Please fasten your seat belts, we are about to land.",
    "Wie spät ist es, und wann fährt der letzte Bus nach Hause?",
    "Die römischen Zähne wurden bei einer Ausgrabung in der Nähe des Flusses gefunden.",
    "Das Flugzeug fliegt sehr tief über die Stadt.",
    "오늘 날씨가 정말 좋네요, 공원에 산책하러 갈까요?",
    "공산당 선언은 1848년에 처음 출판되었다.",
    "회의는 다음 주 월요일 오전 열 시에 시작합니다.",
)


@dataclass(frozen=True)
class Prompts:
    query: str
    document: str


def read_prompts(folder: Path) -> Prompts:
    """The query and document prompts from the model folder's `config_sentence_transformers.json`."""
    try:
        config = json.loads((folder / "config_sentence_transformers.json").read_text())
        prompts = config["prompts"]
        return Prompts(query=str(prompts["query"]), document=str(prompts["document"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{folder}: cannot read the query / document prompts from "
                             f"config_sentence_transformers.json ({exc})") from exc


def source_digest(folder: Path) -> str:
    """The source weights' digest: the assembled archive's SHA-256 its marker records, else the weights' own."""
    marker = folder / ".assembled"
    if marker.is_file() and (text := marker.read_text().strip()):
        return text
    return file_sha256(folder / "model.safetensors")


def conversion_dir(folder: Path, cache_dir: Path) -> Path:
    return cache_dir / "converted" / folder.name / f"{source_digest(folder)[:16]}-v{CONVERSION_VERSION}"


def verified_model(target: Path) -> Path | None:
    """`target`'s ONNX file when the manifest is there and every file it lists has its recorded digest."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        files: dict[str, str] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, dict) or MODEL_FILE not in files:
        return None
    for name, want in files.items():
        path = target / name
        if not path.is_file() or not has_sha256(path, want):
            log.warning("converted embedder file %s is missing or corrupt: converting again", path)
            return None
    return target / MODEL_FILE


def converted_model(folder: Path, cache_dir: Path) -> Path:
    """The verified ONNX file for the sentence-transformers model in `folder`, converting it the first time (or
    again when a file is missing or corrupt). Conversions of one model by several processes are serialised."""
    target = conversion_dir(folder, cache_dir)
    if (model := verified_model(target)) is not None:
        return model
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(target.parent / ".lock"):
            if (model := verified_model(target)) is not None:  # another process converted it meanwhile
                return model
            for stale in target.parent.glob(f".{target.name}-*"):  # staging left by a conversion that was killed
                shutil.rmtree(stale, ignore_errors=True)
            # A warning so a command-line user sees why this first load takes minutes.
            log.warning("converting %s to int8 ONNX, once (a few minutes; needs torch, transformers, onnx and "
                        "onnxscript), into %s", folder.name, target)
            convert(folder, target)
    except ModelLoadError as exc:
        raise ModelLoadError(f"{exc} (or set `embed.backend: torch` to run it with sentence-transformers)") from exc
    except Exception as exc:  # the exporter and quantizer raise many kinds; none should reach a user raw
        raise ModelLoadError(f"converting {folder.name} into {target} failed ({type(exc).__name__}: {exc}); "
                             "set `embed.backend: torch` to run it with sentence-transformers") from exc
    model = verified_model(target)
    if model is None:
        raise ModelLoadError(f"the conversion of {folder.name} in {target} does not verify")
    return model


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert(folder: Path, target: Path) -> dict[str, Any]:
    """Export, quantize and check the model in `folder`; write the result to `target` (replaced whole)."""
    try:
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelLoadError(f"converting {folder.name} needs torch and onnxruntime's quantization tools "
                             f"({exc}); pip install 'mediaindex[embeddinggemma]'") from exc
    prompts = read_prompts(folder)
    texts = [prompts.query + s for s in CHECK_SENTENCES] + [prompts.document + s for s in CHECK_SENTENCES]
    pipeline = _torch_pipeline(folder)
    tokenizer = load_tokenizer(folder / "tokenizer.json")
    ids, mask = tokenize(tokenizer, texts)
    with torch.no_grad():
        reference = pipeline(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        fp32 = staging / "fp32" / MODEL_FILE
        fp32.parent.mkdir()
        _export(pipeline, ids, mask, fp32)
        del pipeline
        fp32_cosines = _cosines(fp32, ids, mask, reference)
        if fp32_cosines.min() < FP32_MIN_COSINE:
            raise ModelLoadError(f"the ONNX export of {folder.name} disagrees with torch (cosine "
                                 f"{fp32_cosines.min():.4f} < {FP32_MIN_COSINE})")
        int8 = staging / MODEL_FILE
        with _root_records_dropped():
            quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul", "Gather"], extra_options={"MatMulConstBOnly": True},
                             nodes_to_exclude=_down_projections(fp32, _intermediate_size(folder)))
        int8_cosines = _cosines(int8, ids, mask, reference)
        if int8_cosines.min() >= INT8_MIN_COSINE:
            precision, cosines = "int8", int8_cosines
            shutil.rmtree(fp32.parent)
        else:
            log.warning("int8 %s agrees with torch at cosine %.4f < %s: keeping fp32", folder.name,
                        int8_cosines.min(), INT8_MIN_COSINE)
            int8.unlink()
            precision, cosines = "fp32", fp32_cosines
            for part in fp32.parent.iterdir():
                os.rename(part, staging / part.name)
            fp32.parent.rmdir()
        manifest = {
            "source": folder.name, "source_sha256": source_digest(folder), "version": CONVERSION_VERSION,
            "precision": precision, "cosine_min": float(cosines.min()), "cosine_mean": float(cosines.mean()),
            "bound": INT8_MIN_COSINE if precision == "int8" else FP32_MIN_COSINE,
            "files": {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache's other folders are readable
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("converted %s: %s, cosine to torch min %.4f mean %.4f", folder.name, precision,
             manifest["cosine_min"], manifest["cosine_mean"])
    return manifest


@contextmanager
def _root_records_dropped() -> Iterator[None]:
    """onnxruntime's quantizer logs advice and a line per tensor on the root logger; none of it concerns a user.
    Records of named loggers still pass."""

    def named_only(record: logging.LogRecord) -> bool:
        return record.name != "root"

    root = logging.getLogger()
    root.addFilter(named_only)
    try:
        yield
    finally:
        root.removeFilter(named_only)


def load_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ModelLoadError(f"cannot read the tokenizer {path}: {exc}") from exc
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    # Right padding: the encoder's positions count from the first token, so left padding would move them.
    tokenizer.enable_padding(direction="right", pad_id=0, pad_token="<pad>")
    return tokenizer


def tokenize(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def _torch_pipeline(folder: Path) -> Any:
    """The sentence-transformers pipeline as one torch module (input ids, mask → normalised embedding)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    bar = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # a bar for a one-second load is noise in a command's output
    try:
        encoder = AutoModel.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
        dense = [load_file(str(folder / sub / "model.safetensors"))["linear.weight"] for sub in ("2_Dense", "3_Dense")]
    except Exception as exc:
        raise ModelLoadError(f"cannot load {folder} with transformers for conversion: {exc}") from exc
    finally:
        if bar:
            transformers_logging.enable_progress_bar()

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.dense = torch.nn.ModuleList()
            for weight in dense:
                layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
                layer.weight.data = weight
                self.dense.append(layer)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            for layer in self.dense:
                pooled = layer(pooled)
            return torch.nn.functional.normalize(pooled, p=2, dim=-1)

    return Pipeline().eval()


def _export(pipeline: Any, ids: np.ndarray, mask: np.ndarray, path: Path) -> None:
    import torch

    try:
        import onnxscript  # noqa: F401  (the exporter needs it; say so before the long export starts)
    except ImportError as exc:
        raise ModelLoadError("converting EmbeddingGemma needs onnx and onnxscript: "
                             "pip install 'mediaindex[embeddinggemma]'") from exc
    batch = torch.export.Dim("batch", min=1, max=4096)
    seq = torch.export.Dim("seq", min=2, max=MAX_TOKENS)
    example = (torch.from_numpy(ids[:2]), torch.from_numpy(mask[:2]))
    # The exporter warns about its own internals (deprecations, optional torchvision ops); none of it is the user's.
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(pipeline, example, str(path), input_names=["input_ids", "attention_mask"],
                              output_names=["sentence_embedding"], opset_version=18, dynamo=True,
                              external_data=True, verbose=False,
                              dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    finally:
        exporter_log.setLevel(level)


def _intermediate_size(folder: Path) -> int:
    try:
        return int(json.loads((folder / "config.json").read_text())["intermediate_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{folder}: config.json does not say the encoder's intermediate_size ({exc})") from exc


def _down_projections(model: Path, intermediate_size: int) -> list[str]:
    """The MLP down projections (constant weights of `intermediate_size` rows), left in fp32.

    Their input, GELU(gate) * up, carries a few very large activations; dynamic quantization gives each
    activation tensor one uint8 scale, which flattens the rest of that tensor. Quantizing them too drops the
    agreement with torch below the bound; leaving these 24 small matrices in fp32 keeps it above."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    rows = {init.name: init.dims[0] for init in graph.initializer if len(init.dims) == 2}
    return [node.name for node in graph.node
            if node.op_type == "MatMul" and len(node.input) > 1 and rows.get(node.input[1]) == intermediate_size]


def _cosines(model: Path, ids: np.ndarray, mask: np.ndarray, reference: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    out = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    return np.asarray((out * reference).sum(axis=1), dtype=np.float64)
