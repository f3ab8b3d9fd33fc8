"""The shot part's word-by-word standing: the query's words, each embedded alone, against the query's shots."""

from __future__ import annotations

import numpy as np
import pytest

from mediaindex.index.store import TEXT_VECTOR, ScoredHit
from mediaindex.search.features import SHOT_NAMES, shot_features
from mediaindex.search.ranking import MAX_QUERY_WORDS, Query, query_words
from mediaindex.segments import Hit

WORDS = SHOT_NAMES.index("shot_words")


def test_query_words_are_the_distinct_runs_of_letters_in_order() -> None:
    assert query_words("a dog, a cat — and a dog's toy!") == ["a", "dog", "cat", "and", "s", "toy"]
    assert query_words("침대 위에서 뛰는 아이들") == ["침대", "위에서", "뛰는", "아이들"]
    assert query_words("Ein Reh im Wald, 2024") == ["Ein", "Reh", "im", "Wald", "2024"]
    assert query_words("...!?") == [] and query_words("") == []
    many = " ".join(f"w{i}" for i in range(3 * MAX_QUERY_WORDS))
    assert query_words(many) == [f"w{i}" for i in range(MAX_QUERY_WORDS)]


def _shot(embedder, text: str) -> ScoredHit:  # noqa: ANN001
    hit = Hit(source="x.mp4", video_id="v", start=0.0, end=1.0, score=0.0, modality="visual", text=text)
    return ScoredHit(hit=hit, dense={TEXT_VECTOR: embedder.embed_passages([text])[0]})


def _query(embedder, text: str) -> Query:  # noqa: ANN001
    words = query_words(text)
    vectors = embedder.embed_queries(words)
    return Query(text, dense=embedder.embed_query(text),
                 word_vectors=vectors / np.linalg.norm(vectors, axis=1, keepdims=True), nameable=0.5)


def test_the_shot_a_query_word_names_stands_out_word_by_word(embedder) -> None:  # noqa: ANN001
    shots = [_shot(embedder, t) for t in ("a photo of a sports car", "a photo of a tabby cat",
                                          "a photo of a banana", "a photo of a stone wall")]
    rows = shot_features(_query(embedder, "a sports car"), shots)
    column = rows[:, WORDS]
    assert int(np.argmax(column)) == 0, column
    # Each word's z-scores over the shots sum to zero, and so does their mean.
    assert float(column.sum()) == pytest.approx(0.0, abs=1e-9)


def test_without_words_or_with_one_shot_the_word_standing_is_zero(embedder) -> None:  # noqa: ANN001
    shots = [_shot(embedder, "a photo of a sports car"), _shot(embedder, "a photo of a banana")]
    q = _query(embedder, "a car")
    assert shot_features(q, shots[:1])[:, WORDS].tolist() == [0.0]
    q.word_vectors = None
    assert shot_features(q, shots)[:, WORDS].tolist() == [0.0, 0.0]
    q.word_vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    assert shot_features(q, shots)[:, WORDS].tolist() == [0.0, 0.0]


def test_a_one_word_query_is_its_own_word(embedder) -> None:  # noqa: ANN001
    from mediaindex.search.ranking import measure_shots

    class Counting:
        name, dim = embedder.name, embedder.dim

        def __init__(self) -> None:
            self.batches: list[list[str]] = []

        def embed_query(self, text: str) -> np.ndarray:
            return embedder.embed_query(text)

        def embed_passages(self, texts: list[str]) -> np.ndarray:
            return embedder.embed_passages(texts)

        def embed_queries(self, texts: list[str]) -> np.ndarray:
            self.batches.append(texts)
            return embedder.embed_queries(texts)

    counting = Counting()
    one = Query("cockatoo", dense=embedder.embed_query("cockatoo"))
    measure_shots(one, counting)
    assert counting.batches == [] and one.word_vectors is not None and one.word_vectors.shape == (1, embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(one.word_vectors, axis=1), 1.0, rtol=1e-5)
    two = Query("a cockatoo, a cockatoo", dense=embedder.embed_query("a cockatoo, a cockatoo"))
    measure_shots(two, counting)
    assert counting.batches == [["a", "cockatoo"]] and two.word_vectors is not None and two.word_vectors.shape == (2, embedder.dim)
