"""Concurrent jobs share one engine: calls from several threads join one batch and get their own answers."""

from __future__ import annotations

import threading

import pytest

from mediaindex.agents.llm import ChatEngine
from mediaindex.config import LLMSettings

pytestmark = pytest.mark.llm

PROMPTS = [
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "What is two plus two?"}],
    [{"role": "user", "content": "Say hello in German."}],
    [],  # an empty prompt: an error for this caller only
]


@pytest.fixture(scope="module")
def stage(cache_dir) -> ChatEngine:
    return ChatEngine(LLMSettings(max_num_seqs=8), cache_dir)


def test_threads_get_the_answers_they_would_get_alone(stage: ChatEngine) -> None:
    alone = [stage.chat([p], max_tokens=12)[0] for p in PROMPTS]
    together: list = [None] * len(PROMPTS)

    def ask(i: int) -> None:
        together[i] = stage.chat([PROMPTS[i]], max_tokens=12)[0]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(t is not None for t in together)
    for a, b in zip(alone[:3], together[:3], strict=True):
        assert a.error is None and a.text and a.text == b.text  # greedy: batching changes nothing
    assert alone[3].error and together[3].error and together[3].finish_reason == "error"
    assert stage.chat([PROMPTS[0]], max_tokens=12)[0].text == alone[0].text  # the engine is still usable
