"""Disaggregated serving: a prefill worker and a decode worker, and the coordinator that routes requests between them.

`DisaggregatedLLM.start` puts each worker in its own Ray actor (resources per `DisaggConfig`; on different GPUs
when the cluster has two). A prefill step's handoffs stay in Ray's object store: the prefill actor puts them there
and the coordinator passes only their references on, so the K/V bytes go from one worker to the other without
passing through (or being pickled again by) the coordinator. `DisaggregatedLLM.local` runs the same two workers in
this process, which is what the tests and the CPU benchmark use to compare with a single engine.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.serving.config import DisaggConfig, WorkerResources
from mediaindex.serving.decode_worker import DecodeWorker
from mediaindex.serving.engine import Prompt, RequestOutput
from mediaindex.serving.errors import InvalidRequestError, ServingError
from mediaindex.serving.loader import load_pretrained, load_smollm2
from mediaindex.serving.prefill_worker import PrefillWorker
from mediaindex.serving.sampling import SamplingParams

log = logging.getLogger(__name__)

# "smollm2" (the bundled model), a local path or hub id, or a model object with its tokenizer.
ModelSource = str | tuple[PreTrainedModel, PreTrainedTokenizerBase]


def load_model(source: ModelSource, dtype: torch.dtype = torch.float32) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    if isinstance(source, tuple):
        return source
    if source == "smollm2":
        return load_smollm2(dtype=dtype)
    return load_pretrained(source, dtype=dtype)


def separate_gpus(cluster_gpus: float, prefill: WorkerResources, decode: WorkerResources) -> bool:
    """Pin the workers to different GPUs when both use one and the cluster has two: fractions alone would let Ray
    pack both onto the same device."""
    return prefill.num_gpus > 0 and decode.num_gpus > 0 and cluster_gpus >= 2


def _failed(request_id: str, error: Exception) -> RequestOutput:
    return RequestOutput(request_id, [], [], [], "", True, "error", error)


def _actor_classes() -> tuple[Any, Any]:
    import ray

    @ray.remote(max_restarts=0)
    class PrefillActor:
        """Thin Ray actor around a PrefillWorker; the model loads once, in the worker process."""

        def __init__(self, source: ModelSource, config: DisaggConfig, dtype: torch.dtype) -> None:
            torch.set_num_threads(config.prefill_resources.threads)
            model, tok = load_model(source, dtype)
            self.worker = PrefillWorker(model, tok, config.prefill, config.handoff_dtype)

        def add(self, requests: list[tuple[str, Prompt, SamplingParams]]) -> list[RequestOutput]:
            return _add_all(self.worker, requests)

        def step(self) -> tuple[list[tuple[str, Any]], list[RequestOutput]]:
            handoffs, failed = self.worker.step()
            # Each handoff goes into the object store once; only its reference travels on.
            return [(h.request_id, ray.put(h)) for h in handoffs], failed

        def inject_corruption(self, request_id: str) -> None:
            self.worker.inject_corruption(request_id)

        def stats(self) -> dict[str, Any]:
            return {**_prefill_stats(self.worker), "gpu_ids": _gpu_ids()}

    @ray.remote(max_restarts=0)
    class DecodeActor:
        """Thin Ray actor around a DecodeWorker."""

        def __init__(self, source: ModelSource, config: DisaggConfig, dtype: torch.dtype) -> None:
            torch.set_num_threads(config.decode_resources.threads)
            model, tok = load_model(source, dtype)
            self.worker = DecodeWorker(model, tok, config.decode)

        def submit(self, refs: list[tuple[str, Any]]) -> None:
            handoffs = []
            for request_id, ref in refs:
                try:
                    handoffs.append(ray.get(ref))
                except Exception as exc:  # a lost object or a dead prefill actor fails this request only
                    self.worker.refuse(request_id, ServingError(f"KV handoff for request {request_id!r} was lost: {exc}"))
            self.worker.submit(handoffs)

        def step(self) -> list[RequestOutput]:
            return self.worker.step()

        def stats(self) -> dict[str, Any]:
            return {**_decode_stats(self.worker), "gpu_ids": _gpu_ids()}

    return PrefillActor, DecodeActor


_ACTORS: tuple[Any, Any] | None = None


def actor_classes() -> tuple[Any, Any]:
    global _ACTORS
    if _ACTORS is None:
        _ACTORS = _actor_classes()
    return _ACTORS


def _gpu_ids() -> list[str]:
    """The GPUs Ray assigned to this actor (empty on CPU)."""
    import ray

    return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]


def _add_all(worker: PrefillWorker, requests: list[tuple[str, Prompt, SamplingParams]]) -> list[RequestOutput]:
    failed = []
    for request_id, prompt, params in requests:
        try:
            worker.add(prompt, params, request_id)
        except InvalidRequestError as exc:
            failed.append(_failed(request_id, exc))
    return failed


def _prefill_stats(worker: PrefillWorker) -> dict[str, float]:
    m = worker.engine.metrics()
    return {
        "handoff_bytes": worker.handoff_bytes,
        "handoff_tokens": worker.handoff_tokens,
        "export_seconds": worker.export_seconds,
        "prefill_tokens": m.prefill_tokens,
        "step_seconds": m.extra["step_seconds"],
        "max_model_len": worker.engine.max_model_len,
    }


def _decode_stats(worker: DecodeWorker) -> dict[str, float]:
    m = worker.engine.metrics()
    return {
        "decode_tokens": m.decode_tokens,
        "imported_prompt_tokens": m.extra["imported_prompt_tokens"],
        "refused": worker.num_refused,
        "import_seconds": worker.import_seconds,
        "preemptions": m.num_preemptions,
        "step_seconds": m.extra["step_seconds"],
    }


class DisaggregatedLLM:
    """Routes each request to the prefill worker, and its handoff to the decode worker as soon as its prefill
    completes; decoding of early requests overlaps the prefill of later ones."""

    def __init__(self, prefill: Any, decode: Any, remote: bool, placement_group: Any = None) -> None:
        self.prefill = prefill
        self.decode = decode
        self.remote = remote
        self._placement_group = placement_group

    @classmethod
    def start(
        cls, source: ModelSource, config: DisaggConfig | None = None, dtype: torch.dtype = torch.float32
    ) -> DisaggregatedLLM:
        """Both workers as Ray actors (Ray must be running: `mediaindex.workers.runtime.ensure_ray`)."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        config = config or DisaggConfig()
        prefill_cls, decode_cls = actor_classes()
        res = (config.prefill_resources, config.decode_resources)
        options: list[dict[str, Any]] = [{"num_cpus": r.num_cpus, "num_gpus": r.num_gpus} for r in res]
        group = None
        if separate_gpus(ray.cluster_resources().get("GPU", 0.0), *res):
            # One whole GPU per bundle, so the two actors cannot land on the same device.
            group = placement_group([{"GPU": 1.0, **({"CPU": r.num_cpus} if r.num_cpus else {})} for r in res])
            ray.get(group.ready(), timeout=120)
            for i, opt in enumerate(options):
                opt["scheduling_strategy"] = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
        prefill = prefill_cls.options(**options[0]).remote(source, config, dtype)
        decode = decode_cls.options(**options[1]).remote(source, config, dtype)
        try:
            ray.get([prefill.stats.remote(), decode.stats.remote()])  # surfaces load errors here
        except Exception:
            for actor in (prefill, decode):
                ray.kill(actor)
            raise
        return cls(prefill, decode, remote=True, placement_group=group)

    @classmethod
    def local(
        cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: DisaggConfig | None = None
    ) -> DisaggregatedLLM:
        """Both workers in this process, each with its own copy of the model."""
        config = config or DisaggConfig()
        decode_model = copy.deepcopy(model)  # before the prefill engine quantizes or re-hooks `model`
        prefill = PrefillWorker(model, tokenizer, config.prefill, config.handoff_dtype)
        decode = DecodeWorker(decode_model, tokenizer, config.decode)
        return cls(prefill, decode, remote=False)

    # -- requests -------------------------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Seq[Prompt],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        request_ids: Seq[str] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts to completion; one final output per prompt, in order. A request that fails (bad prompt, a
        refused handoff) has `error` set; the others are unaffected."""
        ids = self._ids(len(prompts), request_ids)
        final: dict[str, RequestOutput] = {}
        for out in self.stream(prompts, params, ids):
            if out.finished:
                final[out.request_id] = out
        return [final[i] for i in ids]

    def stream(
        self,
        prompts: Seq[Prompt],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        request_ids: Seq[str] | None = None,
    ) -> Iterator[RequestOutput]:
        """Outputs as they arrive (new tokens and final outputs) until every request has finished."""
        plist = list(params) if isinstance(params, Seq) else [params or SamplingParams()] * len(prompts)
        if len(plist) != len(prompts):
            raise InvalidRequestError(f"{len(prompts)} prompts but {len(plist)} sampling params")
        requests = list(zip(self._ids(len(prompts), request_ids), prompts, plist, strict=True))
        if self.remote:
            yield from self._stream_remote(requests)
        else:
            yield from self._stream_local(requests)

    @staticmethod
    def _ids(n: int, request_ids: Seq[str] | None) -> list[str]:
        ids = list(request_ids) if request_ids is not None else [uuid.uuid4().hex for _ in range(n)]
        if len(ids) != n or len(set(ids)) != n:
            raise InvalidRequestError(f"request_ids must be {n} distinct ids, got {ids!r}")
        return ids

    def _stream_local(self, requests: list[tuple[str, Prompt, SamplingParams]]) -> Iterator[RequestOutput]:
        yield from _add_all(self.prefill, requests)
        while self.prefill.has_unfinished() or self.decode.has_unfinished():
            if self.prefill.has_unfinished():
                handoffs, failed = self.prefill.step()
                yield from failed
                self.decode.submit(handoffs)
            if self.decode.has_unfinished():
                yield from self.decode.step()

    def _stream_remote(self, requests: list[tuple[str, Prompt, SamplingParams]]) -> Iterator[RequestOutput]:
        import ray

        failed = ray.get(self.prefill.add.remote(requests))
        yield from failed
        in_prefill = len(requests) - len(failed)
        in_decode = 0
        inflight: dict[Any, str] = {}
        if in_prefill:
            inflight[self.prefill.step.remote()] = "prefill"
        # Each worker always has at most one step in flight; whichever finishes first is handled first.
        while inflight:
            (ready,), _ = ray.wait(list(inflight), num_returns=1)
            kind = inflight.pop(ready)
            if kind == "prefill":
                refs, failed = ray.get(ready)
                in_prefill -= len(refs) + len(failed)
                yield from failed
                if refs:
                    self.decode.submit.remote(refs)  # runs before the decode step submitted next (actor order)
                    in_decode += len(refs)
                if in_prefill:
                    inflight[self.prefill.step.remote()] = "prefill"
            else:
                for out in ray.get(ready):
                    in_decode -= int(out.finished)
                    yield out
            if in_decode and "decode" not in inflight.values():
                inflight[self.decode.step.remote()] = "decode"

    # -- state ----------------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, Any]]:
        if self.remote:
            import ray

            prefill, decode = ray.get([self.prefill.stats.remote(), self.decode.stats.remote()])
        else:
            prefill, decode = _prefill_stats(self.prefill), _decode_stats(self.decode)
        return {"prefill": prefill, "decode": decode}

    def inject_corruption(self, request_id: str) -> None:
        """Fault injection: the named request's handoff gets a flipped byte after its checksum is taken."""
        if self.remote:
            import ray

            ray.get(self.prefill.inject_corruption.remote(request_id))
        else:
            self.prefill.inject_corruption(request_id)

    def close(self) -> None:
        if not self.remote:
            return
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in (self.prefill, self.decode):
            ray.kill(actor)
        if self._placement_group is not None:
            remove_placement_group(self._placement_group)
