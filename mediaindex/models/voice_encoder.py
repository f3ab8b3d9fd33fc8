"""Resemblyzer's voice encoder in numpy: its weights read from the `pretrained.pt` in its wheel, its network
run without torch.

Importing torch (and Resemblyzer's modules, which import it and scipy.ndimage) would cost every process that
diarizes seconds of start-up, for a network of 1.4 M weights: LSTM(40 mel bands → 256, 3 layers) on 1.6 s
windows, a linear layer on the last layer's final hidden state, ReLU, L2 normalisation. Here the
checkpoint is read with the standard library (its pickle through an unpickler that builds nothing but
tensors), and the forward pass is a few numpy matrix products per frame, all windows of a call at once.

The audio is levelled and cut into windows as Resemblyzer does it (`raise_volume`, `window_slices`: its
constants, 16 kHz, 10 ms mel frames, 160-frame windows), so the embeddings are its own (tested against it).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib.util
import io
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mediaindex.errors import ModelLoadError

SAMPLE_RATE = 16_000
MEL_BANDS = 40
HIDDEN = 256
LAYERS = 3
EMBEDDING = 256
PARTIAL_FRAMES = 160  # 1.6 s windows of 10 ms frames
BATCH = 64  # windows embedded together: bounded memory, and enough rows for efficient matrix products
SAMPLES_PER_FRAME = SAMPLE_RATE * 10 // 1000

# Resemblyzer 0.1.4's pretrained.pt: any other file is refused rather than run with unknown weights.
WEIGHTS_SHA256 = "39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e"
_TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # torch's legacy (pre-zip) serialization: pickles, then raw storages
_TORCH_PROTOCOL = 1001
_INT16_MAX = (2**15) - 1


def weights_path() -> Path:
    """The `pretrained.pt` inside the installed resemblyzer package, found without importing it (its
    `__init__` imports torch)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("speaker diarization needs the resemblyzer package (its wheel holds the voice "
                             "encoder's weights, pretrained.pt); install it or set speech.diarize: false")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise ModelLoadError(f"the resemblyzer package has no voice encoder weights ({path.name} missing); "
                             "reinstall it or set speech.diarize: false")
    return path


@dataclass(frozen=True)
class _Storage:
    key: str
    numel: int


@dataclass(frozen=True)
class _TensorRef:
    """A tensor as the pickle describes it; its storage's bytes come after the pickle."""

    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _FloatStorage:
    """Stands for `torch.FloatStorage` (float32) in the checkpoint's pickle."""


def _rebuild_tensor_v2(storage: _Storage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...],
                       requires_grad: bool = False, hooks: Any = None, metadata: Any = None) -> _TensorRef:
    return _TensorRef(storage, int(offset), tuple(int(s) for s in shape), tuple(int(s) for s in stride))


# Everything a state-dict checkpoint needs; any other global in the pickle is refused, not imported.
_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch", "FloatStorage"): _FloatStorage,
}


class _CheckpointUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, storages: dict[str, _Storage]) -> None:
        super().__init__(file)
        self.storages = storages

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a weights file has no need "
                                         "of (refused, not loaded)") from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent record {str(pid)[:80]!r}")
        _, storage_type, key, _location, numel, view = pid
        if storage_type is not _FloatStorage:
            raise pickle.UnpicklingError(f"storage of {storage_type!r}, only float32 is expected")
        if view is not None:
            raise pickle.UnpicklingError("a storage view, which this checkpoint format reader does not take")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(f"malformed storage record {str(pid)[:80]!r}")
        storage = self.storages.setdefault(key, _Storage(key, numel))
        if storage.numel != numel:
            raise pickle.UnpicklingError(f"storage {key} declared with two sizes")
        return storage


def read_torch_checkpoint(data: bytes) -> dict[str, Any]:
    """The object saved by torch's legacy `torch.save` (the format of Resemblyzer's checkpoint), its tensors
    as float32 numpy arrays. Only dicts, lists, numbers, strings and float32 tensors are built."""
    try:
        return _read_legacy(data)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, OverflowError) as exc:
        raise ModelLoadError(f"the voice encoder weights cannot be read: {exc}") from exc


def _read_legacy(data: bytes) -> dict[str, Any]:
    file = io.BytesIO(data)
    storages: dict[str, _Storage] = {}
    header = _CheckpointUnpickler(file, storages)
    if header.load() != _TORCH_MAGIC:
        raise ValueError("not a torch checkpoint (wrong magic number)")
    if (protocol := header.load()) != _TORCH_PROTOCOL:
        raise ValueError(f"torch serialization protocol {protocol}, expected {_TORCH_PROTOCOL}")
    info = header.load()
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise ValueError("not a little-endian checkpoint")
    result = _CheckpointUnpickler(file, storages).load()
    keys = _CheckpointUnpickler(file, storages).load()
    if not isinstance(keys, list) or set(keys) != set(storages):
        raise ValueError("its storage list does not match the tensors it describes")
    arrays: dict[str, np.ndarray] = {}
    at = file.tell()
    for key in keys:  # each storage: its element count (int64), then its float32 values
        numel = int.from_bytes(data[at : at + 8], "little") if at + 8 <= len(data) else -1
        if numel != storages[key].numel or at + 8 + 4 * numel > len(data):
            raise ValueError(f"storage {key} is truncated or has the wrong size")
        arrays[key] = np.frombuffer(data, dtype="<f4", count=numel, offset=at + 8)
        at += 8 + 4 * numel
    return _resolve(result, arrays)


def _resolve(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, _TensorRef):
        values = arrays[obj.storage.key]
        if len(obj.shape) != len(obj.stride) or obj.offset < 0 or min(obj.shape + obj.stride, default=0) < 0:
            raise ValueError(f"a malformed tensor record {obj.shape}, stride {obj.stride}")
        end = obj.offset + sum((n - 1) * s for n, s in zip(obj.shape, obj.stride, strict=True)) + 1
        if end > len(values) and all(obj.shape):
            raise ValueError(f"a tensor {obj.shape} lies outside its storage")
        view = np.lib.stride_tricks.as_strided(values[obj.offset :], obj.shape, tuple(4 * s for s in obj.stride))
        return np.array(view, dtype=np.float32)  # a contiguous copy
    if isinstance(obj, dict):
        return {k: _resolve(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_resolve(v, arrays) for v in obj)
    return obj


def _expected_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"linear.weight": (EMBEDDING, HIDDEN), "linear.bias": (EMBEDDING,)}
    for layer in range(LAYERS):
        shapes[f"lstm.weight_ih_l{layer}"] = (4 * HIDDEN, MEL_BANDS if layer == 0 else HIDDEN)
        shapes[f"lstm.weight_hh_l{layer}"] = (4 * HIDDEN, HIDDEN)
        shapes[f"lstm.bias_ih_l{layer}"] = (4 * HIDDEN,)
        shapes[f"lstm.bias_hh_l{layer}"] = (4 * HIDDEN,)
    return shapes


@dataclass(frozen=True)
class _Layer:
    w_ih_t: np.ndarray  # (in, 4H), gates i, f, g, o as torch orders them, i/f/o rows halved (see `embed`)
    w_hh_t: np.ndarray  # (H, 4H)
    bias: np.ndarray  # (4H,): b_ih + b_hh, halved like the weights


class VoiceEncoderNet:
    """Resemblyzer's VoiceEncoder network, float32 numpy."""

    def __init__(self, state: dict[str, np.ndarray]) -> None:
        shapes = _expected_shapes()
        for name, shape in shapes.items():
            got = state.get(name)
            if not isinstance(got, np.ndarray) or got.shape != shape:
                found = "missing" if got is None else getattr(got, "shape", type(got).__name__)
                raise ModelLoadError(f"the voice encoder weights have no {name} of shape {shape} ({found})")
        # sigmoid(x) = (tanh(x / 2) + 1) / 2: with the input, forget and output gates' rows halved (exact in
        # binary floating point), one tanh over all four gates serves each step.
        half = np.ones(4 * HIDDEN, np.float32)
        half[: 2 * HIDDEN] = half[3 * HIDDEN :] = 0.5
        self.layers = [
            _Layer(np.ascontiguousarray((state[f"lstm.weight_ih_l{k}"] * half[:, None]).T),
                   np.ascontiguousarray((state[f"lstm.weight_hh_l{k}"] * half[:, None]).T),
                   ((state[f"lstm.bias_ih_l{k}"] + state[f"lstm.bias_hh_l{k}"]) * half).astype(np.float32))
            for k in range(LAYERS)]
        self.linear_t = np.ascontiguousarray(state["linear.weight"].T)
        self.linear_bias = state["linear.bias"].astype(np.float32)

    @classmethod
    def load(cls, path: Path | None = None, sha256: str | None = WEIGHTS_SHA256) -> VoiceEncoderNet:
        """The network from Resemblyzer's checkpoint (the installed one unless `path`), checked against
        `sha256` (None: not checked)."""
        path = path or weights_path()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"cannot read the voice encoder weights {path}: {exc}") from exc
        if sha256 is not None and (digest := hashlib.sha256(data).hexdigest()) != sha256:
            raise ModelLoadError(f"the voice encoder weights {path} are not Resemblyzer 0.1.4's pretrained.pt "
                                 f"(SHA-256 {digest}, {len(data)} bytes; expected {sha256}): reinstall "
                                 "resemblyzer==0.1.4")
        checkpoint = read_torch_checkpoint(data)
        state = checkpoint.get("model_state") if isinstance(checkpoint, dict) else None
        if not isinstance(state, dict):
            raise ModelLoadError(f"the voice encoder weights {path} hold no model_state")
        return cls(state)

    def embed(self, mels: np.ndarray, threads: int = 1) -> np.ndarray:
        """(windows, frames, 40) mel spectrograms → (windows, 256) L2-normalised, non-negative embeddings.

        The input products (all frames at once) use up to `threads` BLAS threads; the recurrence's small
        per-frame products use one: handing a (windows × 256) product to a second thread costs far more than
        it saves on busy cores. Windows go through BATCH at a time: the input
        products of a batch hold frames × BATCH × 1024 floats (42 MB for 1.6 s windows)."""
        x = np.asarray(mels, dtype=np.float32)
        if x.ndim != 3 or x.shape[2] != MEL_BANDS:
            raise ValueError(f"expected (windows, frames, {MEL_BANDS}) mel spectrograms, got {x.shape}")
        if len(x) <= BATCH:
            return self._embed_batch(x, threads)
        return np.concatenate([self._embed_batch(x[i : i + BATCH], threads) for i in range(0, len(x), BATCH)])

    def _embed_batch(self, x: np.ndarray, threads: int) -> np.ndarray:
        n, frames, _ = x.shape
        h = np.zeros((n, HIDDEN), np.float32)
        seq = np.ascontiguousarray(x.transpose(1, 0, 2))  # time-major: each step reads one block
        for k, layer in enumerate(self.layers):
            # The input's share of every step at once, then the recurrence frame by frame.
            with _blas_threads(threads):
                gates_in = seq.reshape(frames * n, -1) @ layer.w_ih_t
            gates_in += layer.bias
            gates_in = gates_in.reshape(frames, n, 4 * HIDDEN)
            out = np.empty((frames, n, HIDDEN), np.float32) if k < LAYERS - 1 else None
            h = np.zeros((n, HIDDEN), np.float32)
            c = np.zeros((n, HIDDEN), np.float32)
            act = np.empty((n, 4 * HIDDEN), np.float32)
            with _blas_threads(1):
                for t in range(frames):
                    np.matmul(h, layer.w_hh_t, out=act)
                    act += gates_in[t]
                    np.tanh(act, out=act)  # i, f, o: tanh of half the pre-activation; g: tanh itself
                    c = (act[:, HIDDEN : 2 * HIDDEN] * 0.5 + 0.5) * c \
                        + (act[:, :HIDDEN] * 0.5 + 0.5) * act[:, 2 * HIDDEN : 3 * HIDDEN]
                    h = (act[:, 3 * HIDDEN :] * 0.5 + 0.5) * np.tanh(c)
                    if out is not None:
                        out[t] = h
            if out is not None:
                seq = out
        y = np.maximum(h @ self.linear_t + self.linear_bias, 0.0)
        # A window whose every output is cut by the ReLU (torch would divide by zero) stays all zeros.
        return (y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)).astype(np.float32)


_controller: Any = None


@contextlib.contextmanager
def _blas_threads(n: int) -> Iterator[None]:
    """numpy's BLAS limited to `n` threads (the process's whole pool: BLAS has no per-call setting)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    with _controller.limit(limits=max(1, n), user_api="blas"):
        yield


def raise_volume(wav: np.ndarray, target_dbfs: float = -30.0) -> np.ndarray:
    """Quiet audio scaled up to an RMS of `target_dbfs` (dB of full scale); audio at or above it is left
    alone. The encoder was trained on speech levelled this way (Resemblyzer does the same before embedding)."""
    rms = float(np.sqrt(np.mean(np.square(wav, dtype=np.float32))))
    if rms <= 0.0:
        return wav
    gain_db = target_dbfs - 20.0 * np.log10(rms)
    return wav if gain_db <= 0 else wav * np.float32(10.0 ** (gain_db / 20.0))


def window_slices(n_samples: int, rate: float, min_coverage: float) -> tuple[list[slice], list[slice]]:
    """The 1.6 s windows the encoder embeds over `n_samples` of audio, `rate` of them per second: their
    sample ranges and mel-frame ranges. The windows run past the end of the audio (pad it with zeros); a
    last window less than `min_coverage` audio is dropped, unless it is the only one. These are the
    windows Resemblyzer's `embed_utterance` takes, so the embeddings are its own."""
    if not 0 < min_coverage <= 1:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    frames = int(np.ceil((n_samples + 1) / SAMPLES_PER_FRAME))
    step = int(np.round(SAMPLE_RATE / rate / SAMPLES_PER_FRAME))
    if not 0 < step <= PARTIAL_FRAMES:
        raise ValueError(f"a rate of {rate} windows per second is out of range")
    starts = list(range(0, max(1, frames - PARTIAL_FRAMES + step + 1), step))
    window_samples = PARTIAL_FRAMES * SAMPLES_PER_FRAME
    if len(starts) > 1 and (n_samples - starts[-1] * SAMPLES_PER_FRAME) / window_samples < min_coverage:
        starts.pop()
    frames_of = [slice(f, f + PARTIAL_FRAMES) for f in starts]
    return [slice(f.start * SAMPLES_PER_FRAME, f.stop * SAMPLES_PER_FRAME) for f in frames_of], frames_of
