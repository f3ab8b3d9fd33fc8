"""The prefill side of disaggregated serving: runs prompts, samples each request's first token, hands the KV off."""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.serving.config import EngineConfig, HandoffDType, WeightsConfig
from mediaindex.serving.engine import LLMEngine, Prompt, RequestOutput
from mediaindex.serving.errors import InvalidRequestError
from mediaindex.serving.handoff import KVHandoff, PrefilledRequest, WireDType, pack_handoff
from mediaindex.serving.kv_cache import KVLayout
from mediaindex.serving.quant import SplitPrecisionModel
from mediaindex.serving.sampling import SamplingParams
from mediaindex.serving.sequence import Sequence

log = logging.getLogger(__name__)


class PrefillWorker:
    """An engine of its own (high-precision KV pages, the prefill weight set) that stops every request after its
    first token: at that point the request's prompt K/V is read out of the pages into a `KVHandoff`, and its pages
    go back to the pool. Prompts are batched and chunked by the engine's scheduler as usual."""

    def __init__(
        self,
        model: PreTrainedModel | SplitPrecisionModel,
        tokenizer: PreTrainedTokenizerBase,
        config: EngineConfig | None = None,
        handoff_dtype: HandoffDType = "auto",
    ) -> None:
        config = config or EngineConfig()
        kind = config.resolved_kv_dtype()
        if kind == "fp8_e4m3":
            raise InvalidRequestError(
                "the prefill worker keeps its KV pages in high precision (fp32 or bf16); the decode worker is the "
                "one that stores FP8 (set kv_cache_dtype on the decode side)"
            )
        w = config.weights
        if w is not None and w.decode != w.prefill:
            # Only prompts run here: build the prefill weight set alone, not the decode set beside it.
            config = config.model_copy(update={"weights": WeightsConfig(prefill=w.prefill, decode=w.prefill)})
        self.engine = LLMEngine(model, tokenizer, config)
        self.engine.on_finish = self._export
        self.handoff_dtype: WireDType = kind if handoff_dtype == "auto" else handoff_dtype
        self.layout = KVLayout.from_config(self.engine.model_config)
        self.model_type = str(getattr(self.engine.model_config, "model_type", ""))
        self._params: dict[str, SamplingParams] = {}
        self._ready: list[KVHandoff] = []
        self._corrupt: set[str] = set()
        self.handoff_bytes = 0
        self.handoff_tokens = 0
        self.export_seconds = 0.0  # reading pages out, packing and checksumming

    def add(self, prompt: Prompt, params: SamplingParams, request_id: str | None = None) -> str:
        """Queue a prompt; raises InvalidRequestError if it cannot be served (nothing else is affected)."""
        # Here the request ends at its first token whatever it asks for; stop rules apply on the decode side.
        first_only = dataclasses.replace(params, max_tokens=1, stop=[], ignore_eos=True)
        rid = self.engine.add_request(prompt, first_only, request_id)
        self._params[rid] = params
        return rid

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished()

    def step(self) -> tuple[list[KVHandoff], list[RequestOutput]]:
        """One engine step. Returns the handoffs of requests whose prefill completed in it, and the final outputs of
        requests that failed here (they never reach the decode side)."""
        outs = self.engine.step()
        failed = [o for o in outs if o.finished and o.finish_reason not in ("stop", "length")]
        for o in outs:
            if o.finished:
                self._params.pop(o.request_id, None)
        handoffs, self._ready = self._ready, []
        return handoffs, failed

    def inject_corruption(self, request_id: str) -> None:
        """Fault injection: flip a byte of this request's handoff after its checksum is taken."""
        self._corrupt.add(request_id)

    def _export(self, seq: Sequence) -> None:
        """Engine hook: seq has its first token and still holds its pages."""
        t0 = time.perf_counter()
        cache = self.engine.kv_cache
        n = len(seq.prompt_ids)
        pages = seq.page_table[: -(-n // cache.page_size)]
        dtype = torch.float32 if cache.kind == "fp32" else torch.bfloat16
        ks, vs = [], []
        for layer in range(self.layout.num_layers):
            k, v = cache.read(layer, pages, n, dtype)
            ks.append(k)
            vs.append(v)
        state = seq.generator.get_state() if seq.generator is not None else None
        params = self._params[seq.request_id]
        request = PrefilledRequest(
            seq.request_id, list(seq.prompt_ids), seq.output_ids[0], params, ks, vs, state,
            list(seq.prompt_logprobs) if params.prompt_logprobs else None,
            list(seq.prompt_argmax) if params.prompt_logprobs else None,
        )
        handoff = pack_handoff(request, self.model_type, self.layout, self.handoff_dtype)
        if seq.request_id in self._corrupt:
            self._corrupt.discard(seq.request_id)
            handoff.flip_byte(handoff.nbytes // 2)
            log.warning("fault injection: corrupted the KV handoff of %s", seq.request_id)
        self.export_seconds += time.perf_counter() - t0
        self.handoff_bytes += handoff.nbytes
        self.handoff_tokens += n
        self._ready.append(handoff)
