"""A picture the classifier has no words for is placed in the text space among its likely classes (ConSE)."""

from __future__ import annotations

import numpy as np
import pytest

from mediaindex.models.classifier import class_description
from mediaindex.models.imagenet_labels import LABELS
from mediaindex.models.label_space import LabelSpace, segment_vectors
from mediaindex.models.passage_cache import cache_file
from mediaindex.segments import CLASSES_FIELD, Segment

TABBY, TIGER_CAT, SPORTS_CAR = LABELS.index("tabby cat"), LABELS.index("tiger cat"), LABELS.index("sports car")


class Counting:
    """The real embedder, counting the passages it is given."""

    def __init__(self, embedder) -> None:
        self.embedder, self.name, self.dim, self.passages = embedder, embedder.name, embedder.dim, 0

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.passages += len(texts)
        return self.embedder.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embedder.embed_query(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed_queries(texts)


@pytest.fixture(scope="module")
def space(embedder, cache_dir) -> LabelSpace:
    return LabelSpace(embedder, cache_dir)


def _picture(classes: list[list[float]], text: str = "") -> Segment:
    return Segment("v", "/media/v.mp4", 0.0, 2.0, "visual", text, extra={CLASSES_FIELD: classes})


def test_a_picture_lies_among_the_names_of_its_likely_classes(embedder, space) -> None:
    cat, car = space.places([[[TABBY, 0.5], [TIGER_CAT, 0.3]], [[SPORTS_CAR, 0.6], [TABBY, 0.05]]])
    assert np.linalg.norm(cat) == pytest.approx(1.0, abs=1e-5) and np.linalg.norm(car) == pytest.approx(1.0, abs=1e-5)
    query = embedder.embed_query("a cat")
    assert float(query @ cat) > float(query @ car)
    # Its weights count: a picture surely of a tabby lies nearer that name than one that hesitates.
    name = embedder.embed_passages([class_description("tabby cat")])[0]
    sure, unsure = space.places([[[TABBY, 0.9], [SPORTS_CAR, 0.1]], [[TABBY, 0.3], [SPORTS_CAR, 0.3]]])
    assert float(name @ sure) > float(name @ unsure)


def test_the_class_names_are_embedded_once_and_kept_in_the_cache(embedder, tmp_path) -> None:
    counting = Counting(embedder)
    names = [class_description(n) for n in LABELS]
    # A damaged cache file (here: cut short) is made again, never read as vectors.
    cached = cache_file(embedder.name, names, tmp_path, "class-names")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'")
    space = LabelSpace(counting, tmp_path)
    assert counting.passages == 0  # nothing before the first picture
    first = space.places([[[TABBY, 0.5], [TIGER_CAT, 0.3]]])
    space.places([[[SPORTS_CAR, 0.7]]])
    assert counting.passages == len(LABELS)
    again = LabelSpace(counting, tmp_path)  # another process: read from the cache
    np.testing.assert_allclose(again.places([[[TABBY, 0.5], [TIGER_CAT, 0.3]]]), first, atol=1e-6)
    assert counting.passages == len(LABELS)


def test_a_place_is_no_nearer_to_every_query_than_a_plain_mean_is(embedder, space) -> None:
    # A plain mean of names drifts towards their centre, where it resembles any query; the place keeps one
    # name's distance from the centre, so an unrelated query finds it less alike than the mean.
    spread = [[k, 0.1] for k in range(0, 1000, 100)]  # a picture the classifier cannot tell at all
    place = space.places([spread])[0]
    names = embedder.embed_passages([class_description(LABELS[k]) for k, _ in spread])
    for query in ("a man riding a bicycle", "the moon over the sea", "ein Kind im Park"):
        q = embedder.embed_query(query)
        mean = names.mean(axis=0) / np.linalg.norm(names.mean(axis=0))
        assert float(q @ place) < float(q @ mean)


@pytest.mark.parametrize("classes", [[], [[1000, 0.5]], [[-1, 0.5]], [[TABBY, -0.1]], [[TABBY, float("nan")]],
                                     [[TABBY, 0.0]], [["cat", 0.5]], [[TABBY]], "tabby"])
def test_what_is_not_class_probabilities_is_refused(space, classes) -> None:
    with pytest.raises(ValueError, match="class probabilities"):
        space.places([classes])


def test_only_pictures_without_words_are_placed(embedder, space) -> None:
    said = Segment("v", "/media/v.mp4", 0.0, 2.0, "speech", "a cat sat on the mat")
    named = _picture([[TABBY, 0.6]], text="a photo of a tabby cat")  # a labelled picture keeps its text's vector
    unnamed = _picture([[TABBY, 0.2], [TIGER_CAT, 0.1]])
    vectors = segment_vectors(embedder, [said, named, unnamed], space)
    texts = embedder.embed_passages([said.text, named.text])
    np.testing.assert_allclose(vectors[:2], texts, atol=1e-5)
    np.testing.assert_allclose(vectors[2], space.places([unnamed.class_probabilities])[0], atol=1e-6)
    assert unnamed.has_text_vector and named.has_text_vector
    assert not Segment("v", "/media/v.mp4", 0, 1, "visual", "").has_text_vector
    assert segment_vectors(embedder, []).shape == (0, embedder.dim)
