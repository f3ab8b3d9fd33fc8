"""The decode side of disaggregated serving: takes KV handoffs in, checks them, and decodes with continuous batching."""

from __future__ import annotations

import logging
import time

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.serving.config import EngineConfig
from mediaindex.serving.engine import LLMEngine, RequestOutput
from mediaindex.serving.errors import ServingError
from mediaindex.serving.handoff import KVHandoff, PrefilledRequest
from mediaindex.serving.kv_cache import KVLayout
from mediaindex.serving.quant import SplitPrecisionModel

log = logging.getLogger(__name__)


class DecodeWorker:
    """An engine of its own (FP8 KV pages by default, the decode weight set). Each handoff is verified (checksum,
    model and KV layout, whether it fits this engine) and refused alone when it fails; the accepted ones have their
    prompt K/V stored in this engine's pages, in its KV dtype, and decode alongside every other running request.

    A request preempted here is recomputed by this engine's own model, as in a single engine."""

    def __init__(
        self,
        model: PreTrainedModel | SplitPrecisionModel,
        tokenizer: PreTrainedTokenizerBase,
        config: EngineConfig | None = None,
    ) -> None:
        self.engine = LLMEngine(model, tokenizer, config or EngineConfig(kv_cache_dtype="fp8_e4m3"))
        self.layout = KVLayout.from_config(self.engine.model_config)
        self.model_type = str(getattr(self.engine.model_config, "model_type", ""))
        self._refused: list[RequestOutput] = []
        self.num_refused = 0
        self.import_seconds = 0.0  # verifying, unpacking and storing handoffs

    def submit(self, handoffs: list[KVHandoff]) -> None:
        """Accept handoffs (all that arrived together are stored in one write per layer)."""
        t0 = time.perf_counter()
        accepted: list[PrefilledRequest] = []
        for handoff in handoffs:
            try:
                handoff.verify()
                handoff.check_compatible(self.model_type, self.layout, self.engine.vocab_size)
                self.engine.check_request(handoff.prompt_ids, handoff.params, handoff.request_id)
                if any(r.request_id == handoff.request_id for r in accepted):
                    raise ServingError(f"request id {handoff.request_id!r} was handed over twice")
                accepted.append(handoff.unpack())
            except ServingError as exc:
                self.refuse(handoff.request_id, exc)
        self.engine.add_prefilled(accepted)
        self.import_seconds += time.perf_counter() - t0

    def refuse(self, request_id: str, error: Exception) -> None:
        """Report a request that will not be decoded here; it comes out of the next step as a failed output (with no
        prompt ids: those of a refused handoff are not trusted)."""
        log.error("%s", error)
        self.num_refused += 1
        self._refused.append(RequestOutput(request_id, [], [], [], "", True, "error", error))

    def has_unfinished(self) -> bool:
        return bool(self._refused) or self.engine.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """One decode step: new tokens of running requests, finished requests, refused handoffs."""
        refused, self._refused = self._refused, []
        outs = self.engine.step() if self.engine.has_unfinished() else []
        return refused + outs
