"""The language model: one serving engine (`mediaindex.serving.LLMEngine`) behind a small chat interface.

`ChatEngine` is the plain class that owns the engine; `LLMActor` is the thin Ray actor around it, and
`RemoteLLM` is what jobs hold: it sends batches of conversations to the actor. Every model call of the agentic
jobs goes through `ChatModel.chat`, so the model runs in our engine and nowhere else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.agents.batching import ContinuousBatcher
from mediaindex.config import LLMSettings, Settings, default_cache_dir
from mediaindex.errors import ModelLoadError

if TYPE_CHECKING:
    from ray.actor import ActorClass

log = logging.getLogger(__name__)

Message = dict[str, str]


@dataclass
class Completion:
    text: str
    finish_reason: str | None  # "stop" | "length" | "abort" | "error"
    tokens: int  # generated tokens
    error: str | None = None


class ChatModel(Protocol):
    """What the jobs need from a language model: a batch of chats in, one completion each out."""

    name: str

    @property
    def max_context(self) -> int: ...  # tokens of prompt + output one request may use

    # `guide`: a grammar (xgrammar EBNF) every completion must match; the engine enforces it while decoding.

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]: ...


def engine_config(settings: LLMSettings) -> Any:  # -> mediaindex.serving.EngineConfig
    from mediaindex.serving import EngineConfig

    device = settings.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    fields: dict[str, Any] = {
        "device": device,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "page_size": settings.page_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "quant_group_size": settings.quant_group_size,
        "integrity_checks": settings.integrity_checks,
        "attention_backend": settings.attention_backend,
    }
    if settings.weights is not None:
        fields["weights"] = settings.weights.model_dump()
    if settings.kv_cache_memory_bytes is not None:
        fields["kv_cache_memory_bytes"] = settings.kv_cache_memory_bytes
    if settings.max_model_len is not None:
        fields["max_model_len"] = settings.max_model_len
    return EngineConfig(**fields)


def _sampling(max_tokens: int, stop: list[str] | None, temperature: float, guide: str | None) -> Any:
    from mediaindex.serving import Guide, SamplingParams

    return SamplingParams(temperature=temperature, max_tokens=max_tokens, stop=list(stop or []),
                          seed=0 if temperature > 0 else None, guide=Guide(guide) if guide else None)


def _completions(outs: list[Any]) -> list[Completion]:
    return [Completion(o.text, o.finish_reason, len(o.token_ids), str(o.error) if o.error else None) for o in outs]


class ChatEngine:
    """Owns one LLMEngine built from LLMSettings: the bundled SmolLM2, or a local path / hub id."""

    def __init__(self, settings: LLMSettings, cache_dir: Path | None = None) -> None:
        import torch

        from mediaindex.models.bundled import bundled_lm, bundled_lm_dir
        from mediaindex.serving import LLMEngine

        # Ray workers start with one thread (OMP_NUM_THREADS=1); the language model wants the cores.
        torch.set_num_threads(settings.cpu_threads or os.cpu_count() or 1)
        config = engine_config(settings)
        try:
            if settings.model == "smollm2":
                self.engine = LLMEngine.from_smollm2(config)
            else:
                dtype = getattr(torch, settings.dtype)
                bundled = bundled_lm(settings.model)
                source = str(bundled_lm_dir(bundled, cache_dir or default_cache_dir())) if bundled else settings.model
                if config.device == "cpu" and (settings.cpu_weights != "bf16" or settings.cpu_head_weights != "bf16"):
                    self.engine = _quantized_cpu_engine(source, config, dtype, settings, cache_dir)
                else:
                    self.engine = LLMEngine.from_pretrained(source, config, dtype=dtype)
        except ModelLoadError:
            raise
        except Exception as exc:  # transformers raises many kinds; the user needs the model name and cause
            raise ModelLoadError(f"cannot load language model {settings.model!r}: {exc}") from exc
        self.name = settings.model
        self.max_context = int(self.engine.max_model_len)
        self.batcher = ContinuousBatcher(self.engine)

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        """Conversations from every caller (thread) join one continuous batch in the engine."""
        if not conversations:
            return []
        params = _sampling(max_tokens, stop, temperature, guide)
        return _completions(self.batcher.generate(conversations, [params] * len(conversations)))

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "max_context": self.max_context}


def _quantized_cpu_engine(source: str, config: Any, dtype: Any, settings: LLMSettings,
                          cache_dir: Path | None) -> Any:  # -> LLMEngine
    """The model's linear layers as int8 / int4 for torch's weight-only CPU kernels (`llm.cpu_weights`,
    `llm.cpu_head`), packed once into the model cache, then the engine."""
    from mediaindex.serving import LLMEngine
    from mediaindex.serving.model_runner import load_pretrained
    from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu, source_fingerprint

    model, tok = load_pretrained(source, dtype=dtype)
    weights = CpuWeights(body=settings.cpu_weights, head=settings.cpu_head_weights, group_size=settings.cpu_group_size,
                         prefill=settings.cpu_prefill, int8_layers=tuple(settings.cpu_int8_layers),
                         activations=settings.cpu_activations)
    report = quantize_cpu(model, weights, model_id=source_fingerprint(source), name=settings.model,
                          cache_dir=cache_dir or default_cache_dir())
    log.info("%s: %d int4 and %d int8 layers for the CPU (%s)", settings.model, report.int4_layers,
             report.int8_layers, "from the packed cache" if report.from_cache else "packed now")
    return LLMEngine(model, tok, config)


def _actor_class() -> ActorClass[Any]:
    import ray

    # Ray's stubs leave out the actor options (max_concurrency) of ray.remote's keyword form.
    @ray.remote(max_restarts=1, max_task_retries=0, max_concurrency=32)
    class LLMActor:
        """Thin Ray actor: the model loads once, in the worker process; concurrent jobs' calls run in threads and
        share the engine's batch."""

        def __init__(self, settings: LLMSettings, cache_dir: Path | None = None) -> None:
            self.engine = ChatEngine(settings, cache_dir)

        def info(self) -> dict[str, Any]:
            return self.engine.info()

        def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
                 temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
            return self.engine.chat(conversations, max_tokens, stop, temperature, guide)

    # ray.remote made it an ActorClass; mypy does not apply a class decorator's result.
    return cast("ActorClass[Any]", LLMActor)


_ACTOR: Any = None


def llm_actor_class() -> ActorClass[Any]:
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = _actor_class()
    return _ACTOR


class RemoteLLM:
    """A ChatModel whose engine lives in an `LLMActor`."""

    def __init__(self, actor: Any) -> None:
        import ray

        self.actor = actor
        try:
            info = ray.get(actor.info.remote())
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            raise ModelLoadError(str(cause)) from exc
        self.name: str = info["name"]
        self.max_context: int = info["max_context"]

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        import ray

        return ray.get(self.actor.chat.remote(conversations, max_tokens, stop, temperature, guide))

    def close(self) -> None:
        import ray

        ray.kill(self.actor)


class DisaggregatedChat:
    """A ChatModel over a prefill actor and a decode actor (`llm.disaggregated`): the same engine code, with the
    prompt's KV handed from one to the other."""

    def __init__(self, settings: Settings, cpus: float, gpus: float) -> None:
        import torch

        from mediaindex.serving import DisaggConfig, WorkerResources
        from mediaindex.serving.disagg import DisaggregatedLLM

        base = engine_config(settings.llm)
        decode_kv = "fp8_e4m3" if base.kv_cache_dtype == "auto" else base.kv_cache_dtype
        prefill_kv = "auto" if base.kv_cache_dtype == "fp8_e4m3" else base.kv_cache_dtype  # prefill stays precise
        resources = WorkerResources(num_cpus=cpus, num_gpus=gpus, torch_threads=settings.llm.cpu_threads)
        try:
            config = DisaggConfig(prefill=base.model_copy(update={"kv_cache_dtype": prefill_kv}),
                                  decode=base.model_copy(update={"kv_cache_dtype": decode_kv}),
                                  prefill_resources=resources, decode_resources=resources)
            self.llm = DisaggregatedLLM.start(settings.llm.model, config, dtype=getattr(torch, settings.llm.dtype))
        except ModelLoadError:
            raise
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            raise ModelLoadError(f"cannot start disaggregated language model {settings.llm.model!r}: {cause}") from exc
        self.name = settings.llm.model
        self.max_context = int(self.llm.stats()["prefill"]["max_model_len"])

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        if not conversations:
            return []
        return _completions(self.llm.generate(conversations, _sampling(max_tokens, stop, temperature, guide)))

    def close(self) -> None:
        self.llm.close()


StartRay = Callable[[Settings], object]


def start_llm(settings: Settings, start_ray: StartRay | None = None) -> RemoteLLM | DisaggregatedChat:
    """The language-model actor(s), with the `ray.stages.summary` share the summary stage uses. `start_ray`
    starts or joins Ray first (the service passes `mediaindex.workers.runtime.ensure_ray`); without it Ray
    must be running already."""
    import ray

    if start_ray is not None:
        start_ray(settings)
    elif not ray.is_initialized():
        raise ModelLoadError("Ray is not running: start it before the language model (start_ray)")
    share = settings.ray.stages.summary
    gpus = 0.0 if settings.llm.device == "cpu" else share.gpus  # a model on the CPU reserves no GPU share
    if settings.llm.disaggregated:
        return DisaggregatedChat(settings, share.cpus, gpus)
    actor = llm_actor_class().options(num_gpus=gpus, num_cpus=share.cpus).remote(settings.llm, settings.cache_dir)
    return RemoteLLM(actor)
