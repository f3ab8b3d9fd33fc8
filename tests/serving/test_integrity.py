"""KV-page integrity: injected ownership faults (on the allocator's state and on the data path the kernels read:
a redirected write, a corrupted block table) abort exactly the requests they hit, no corrupted token reaches a
caller, everyone else's output is unchanged; without checks the same faults corrupt output; and a long randomized
run raises no false alarm."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from mediaindex.serving import EngineConfig, KVIntegrityError, LLMEngine, SamplingParams
from mediaindex.serving.integrity import NoOpTracker
from mediaindex.serving.testing import FaultInjector, FaultRecord

KINDS = ["reassign", "bump_tag", "swap", "swap_within", "redirect", "bad_table"]


def _inject(inj: FaultInjector, kind: str, a: str, b: str | None) -> FaultRecord | None:
    if kind == "reassign":
        return inj.reassign_live_page(a)
    if kind == "bump_tag":
        return inj.bump_tag(a)
    if kind == "swap":
        return inj.swap_page_table_entries(a, b)
    if kind == "redirect":
        return inj.redirect_writes(a, into=b) if b is not None else None
    if kind == "bad_table":
        return inj.corrupt_block_table(a)
    return inj.swap_page_table_entries(a)


def _run(
    engine: LLMEngine,
    arrivals: dict[int, list[tuple[str, list[int], SamplingParams]]],
    hook: Callable[[LLMEngine, int], None] | None = None,
) -> dict[str, object]:
    """Add requests at the given steps, call hook(engine, step) before each step, return final outputs by id."""
    done: dict[str, object] = {}
    step = 0
    last_arrival = max(arrivals)
    while step <= last_arrival or engine.has_unfinished():
        for rid, prompt, params in arrivals.get(step, []):
            engine.add_request(prompt, params, request_id=rid)
        if hook:
            hook(engine, step)
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        step += 1
    return done


def _engine(tiny_models, tok, checks: bool, **cfg) -> LLMEngine:
    model, _ = tiny_models("llama")
    config = dict(page_size=4, num_pages=64, max_num_batched_tokens=32, integrity_checks=checks)
    config.update(cfg)
    return LLMEngine(model, tok, EngineConfig(**config))


def _assert_pool_consistent(engine: LLMEngine) -> None:
    bm = engine.block_manager
    assert bm.num_used == 0
    assert all(rc == 0 for rc in bm.ref_counts)
    assert sorted(bm.free) == list(range(bm.num_pages))


def _assert_safe(outs: dict, ref: dict, allowed_aborts: set[str]) -> set[str]:
    """Every output is either the fault-free one, or an integrity abort of an allowed request carrying only tokens
    produced before the fault. Returns the aborted ids."""
    aborted = set()
    assert outs.keys() == ref.keys()
    for rid, out in outs.items():
        if out.error is None:
            assert out.token_ids == ref[rid].token_ids, f"{rid} returned corrupted tokens"
        else:
            assert isinstance(out.error, KVIntegrityError), out.error
            assert out.error.request_id == rid and out.finish_reason == "error"
            assert rid in allowed_aborts, f"{rid} aborted without being affected: {out.error}"
            assert out.token_ids == ref[rid].token_ids[: len(out.token_ids)], "tokens after the fault returned"
            aborted.add(rid)
    return aborted


# -- deterministic: one fault, known victims ----------------------------------------------------------------------


def _fixed_workload(h) -> dict[int, list]:
    prompts = h.random_prompts([9, 14, 11, 7], seed=11)
    params = SamplingParams(max_tokens=14, ignore_eos=True)
    return {
        0: [("r0", prompts[0], params), ("r1", prompts[1], params), ("r2", prompts[2], params)],
        6: [("r3", prompts[3], params)],  # admitted right after the fault: takes a prematurely freed page
    }


def _fixed_hook(kind: str, records: list):
    def hook(engine: LLMEngine, step: int) -> None:
        if step == 6:
            rec = _inject(FaultInjector(engine), kind, "r1", "r2")
            assert rec is not None
            records.append(rec)

    return hook


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_aborts_exactly_its_victims(kind, tiny_models, char_tokenizer, h, caplog):
    workload = _fixed_workload(h)
    ref_engine = _engine(tiny_models, char_tokenizer, checks=True)
    ref = _run(ref_engine, workload)
    assert all(o.error is None for o in ref.values())
    assert ref_engine.metrics().integrity_aborts == 0

    records: list[FaultRecord] = []
    engine = _engine(tiny_models, char_tokenizer, checks=True)
    outs = _run(engine, workload, _fixed_hook(kind, records))
    expected = {"r1", "r2"} if kind == "swap" else {"r1"}
    assert records[0].holders == expected
    aborted = _assert_safe(outs, ref, expected)
    assert aborted == expected
    err = outs["r1"].error
    assert err.page in records[0].pages and err.expected_tag != err.found_tag or err.found_page != err.page
    assert "r1" in str(err) and f"page {err.page}" in str(err)
    assert any("KV integrity check failed" in r.message for r in caplog.records)
    assert engine.metrics().integrity_aborts == len(expected)
    _assert_pool_consistent(engine)


@pytest.mark.parametrize("kind", KINDS)
def test_without_checks_the_same_fault_corrupts_output(kind, tiny_models, char_tokenizer, h):
    workload = _fixed_workload(h)
    ref = _run(_engine(tiny_models, char_tokenizer, checks=False), workload)
    engine = _engine(tiny_models, char_tokenizer, checks=False)
    assert isinstance(engine.tracker, NoOpTracker)
    records: list[FaultRecord] = []
    outs = _run(engine, workload, _fixed_hook(kind, records))
    assert all(o.error is None for o in outs.values()), "nothing notices the fault"
    corrupted = {rid for rid, o in outs.items() if o.token_ids != ref[rid].token_ids}
    assert corrupted & records[0].holders, "the fault must visibly change a victim's output"


# -- randomized: faults at random steps under continuous batching with preemption ------------------------------------


def _random_workload(h, seed: int, n: int = 14) -> dict[int, list]:
    rng = random.Random(seed)
    shared = h.random_prompts([8], seed=seed + 100)[0]
    arrivals: dict[int, list] = {}
    for i in range(n):
        tail = h.random_prompts([rng.randint(2, 14)], seed=seed * 1000 + i)[0]
        prompt = shared + tail if rng.random() < 0.4 else tail  # some prompts share prefix pages
        params = SamplingParams(max_tokens=rng.randint(6, 18), ignore_eos=True)
        arrivals.setdefault(rng.randint(0, 20), []).append((f"r{i}", prompt, params))
    return arrivals


def _random_hook(kind: str, seed: int, records: list):
    rng = random.Random(seed)
    fault_steps = set(rng.sample(range(3, 30), 3))

    def hook(engine: LLMEngine, step: int) -> None:
        if step not in fault_steps:
            return
        ids = sorted(s.request_id for s in engine.scheduler.running)
        rng.shuffle(ids)
        inj = FaultInjector(engine)
        for i, a in enumerate(ids):
            rec = _inject(inj, kind, a, ids[(i + 1) % len(ids)] if len(ids) > 1 else None)
            if rec is not None:
                records.append(rec)
                return

    return hook


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_faults_under_preemption(kind, seed, tiny_models, char_tokenizer, h):
    workload = _random_workload(h, seed)
    # 18 pages of 4 tokens cannot hold everyone: requests get preempted and recomputed.
    small = dict(num_pages=18, max_num_batched_tokens=12)
    ref_engine = _engine(tiny_models, char_tokenizer, checks=True, **small)
    ref = _run(ref_engine, workload)
    assert all(o.error is None for o in ref.values())
    assert ref_engine.metrics().num_preemptions > 0

    records: list[FaultRecord] = []
    engine = _engine(tiny_models, char_tokenizer, checks=True, **small)
    outs = _run(engine, workload, _random_hook(kind, seed, records))
    assert records, "faults were injected"
    holders = set().union(*(r.holders for r in records))
    aborted = _assert_safe(outs, ref, holders)
    assert aborted, "at least one fault hit a live request"
    assert engine.metrics().num_preemptions > 0
    _assert_pool_consistent(engine)

    # The same injections with checks off return corrupted tokens as if nothing happened.
    records_off: list[FaultRecord] = []
    off = _engine(tiny_models, char_tokenizer, checks=False, **small)
    outs_off = _run(off, workload, _random_hook(kind, seed, records_off))
    assert all(o.error is None for o in outs_off.values())
    assert any(outs_off[r].token_ids != ref[r].token_ids for r in ref)


# -- no false alarms ---------------------------------------------------------------------------------------------


def test_long_randomized_run_raises_no_false_alarm(char_tokenizer, h):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=128,
    )
    model = LlamaForCausalLM(cfg).eval()
    engine = LLMEngine(
        model,
        char_tokenizer,
        EngineConfig(page_size=4, num_pages=40, max_num_seqs=24, max_num_batched_tokens=48, integrity_checks=True),
    )
    rng = random.Random(0)
    prefixes = h.random_prompts([4, 8, 12], seed=3)
    n_requests, added, cancelled, finished = 2000, 0, 0, 0
    live: list[str] = []
    while added < n_requests or engine.has_unfinished():
        for _ in range(rng.randint(0, 6)):
            if added < n_requests:
                tail = h.random_prompts([rng.randint(1, 10)], seed=10_000 + added)[0]
                prompt = rng.choice(prefixes) + tail if rng.random() < 0.3 else tail
                rid = engine.add_request(prompt, SamplingParams(max_tokens=rng.randint(1, 8), ignore_eos=True))
                live.append(rid)
                added += 1
        if live and rng.random() < 0.1:
            victim = live.pop(rng.randrange(len(live)))
            engine.abort(victim)
        for out in engine.step():
            if out.finished:
                assert out.error is None, out.error
                if out.request_id in live:
                    live.remove(out.request_id)
                if out.finish_reason == "abort":
                    cancelled += 1
                else:
                    finished += 1
    m = engine.metrics()
    assert m.integrity_aborts == 0
    assert finished + cancelled == n_requests and cancelled > 50
    assert m.num_preemptions > 0 and m.prefix_hit_tokens > 0
    assert engine.tracker.num_checks == m.num_steps
    _assert_pool_consistent(engine)
