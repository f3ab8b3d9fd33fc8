"""The fixed text FP8 KV scales are calibrated on, once per engine, at load.

Scales are fixed once set (changing them would reinterpret pages already written). Taking them from whichever
request happens to be written first made every later request's tokens depend on traffic; one fixed pass over the
same text for every engine of a model makes them a property of the model alone. The text mixes the kinds of input
the engine serves (prose, transcript lines, dialogue, numbers, code, JSON) so the K/V ranges it sees are typical;
scales keep headroom above what it produces (see `kv_cache.SCALE_HEADROOM`) and larger values saturate.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

CALIBRATION_TOKENS = 512  # at most; fewer when the context or the pool is smaller

_USER = (
    "Summarize this transcript in two sentences, then list the people who speak and what each one says.\n"
    "[00:00:03] The city council opened the meeting at seven, with the budget for the new library first.\n"
    "[00:00:41] Maria Lopez: We counted 12,480 visitors last year, 31% more than in 2022, and the roof leaks.\n"
    "[00:01:15] John Smith: Then fix the roof first. The rest can wait until the spring review, can't it?\n"
    "Answer in JSON with the keys \"summary\", \"speakers\" and \"start_seconds\"."
)
_ASSISTANT = (
    '{"summary": "The council discussed the library budget; visits rose by 31% and the roof needs repair.", '
    '"speakers": ["Maria Lopez", "John Smith"], "start_seconds": [41, 75]}\n'
    "def shots(frames: list[float], threshold: float = 0.35) -> list[int]:\n"
    "    return [i for i, d in enumerate(frames) if d > threshold]\n"
    "Le conseil a voté le budget; die Bibliothek öffnet im Mai. 3.14159 x 2 = 6.28318; SELECT id FROM t;"
)


def calibration_ids(tokenizer: PreTrainedTokenizerBase, max_tokens: int) -> list[int]:
    """Token ids of the calibration text (as a chat turn when the tokenizer has a template), repeated to fill
    `max_tokens` so late positions are covered too."""
    ids: list[int] = []
    if getattr(tokenizer, "chat_template", None) is not None:
        try:
            messages = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ASSISTANT}]
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        except Exception:  # templates that insist on other roles or fields: the plain text serves as well
            ids = []
    if not ids:
        ids = list(tokenizer(_USER + "\n" + _ASSISTANT, add_special_tokens=True)["input_ids"])
    if not ids:
        ids = [0]
    repeated = ids * (max_tokens // len(ids) + 1)
    return repeated[:max_tokens]
