"""The vector store on both deployments (embedded qdrant-edge, qdrant-client against a "server"):
filters, replacement without duplicates, schema and corrupt-index errors, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mediaindex.config import Settings
from mediaindex.errors import ConfigError, IndexCorruptError, IndexSchemaError
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import SearchFilters, metadata_matches
from mediaindex.index.index import MediaIndex
from mediaindex.index.server_store import ServerUnavailableError
from mediaindex.segments import Segment
from tests.conftest import make_settings
from tests.corpus import manifesto, references

DIM = 384


@pytest.fixture(scope="module")
def segments(embedder) -> tuple[list[Segment], np.ndarray]:
    """Real captions and references, plus on-screen-text and visual segments without a language."""
    segs = manifesto() + references()
    title = manifesto()[0]
    segs += [
        Segment(title.video_id, title.source, 13.0, 16.0, "ocr", "MANIFESTO OF THE COMMUNIST PARTY"),
        Segment(title.video_id, title.source, 40.0, 45.0, "visual", "book jacket, comic book"),
    ]
    return segs, embedder.embed_passages([s.text for s in segs])


def _settings(tmp_path: Path, cache_dir: Path, backend: str) -> Settings:
    if backend == "edge":
        return make_settings(tmp_path / "index", cache_dir)
    return make_settings(tmp_path / "index", cache_dir,
                         index={"backend": "server", "url": f"local:{tmp_path / 'qdrant-server'}"})


def _record(segs: list[Segment], source: str | None = None) -> VideoRecord:
    return VideoRecord(segs[0].video_id, source or segs[0].source, segs[0].video_id, 1, 1, None, "en",
                       len(segs), {}, 0.0)


def _fill(index: MediaIndex, segs: list[Segment], vectors: np.ndarray,
          metadata: dict[str, dict] | None = None) -> None:
    """Index the segments file by file; `metadata` (by file name) goes into their catalog entries."""
    by_video: dict[str, list[int]] = {}
    for i, s in enumerate(segs):
        by_video.setdefault(s.video_id, []).append(i)
    for rows in by_video.values():
        record = _record([segs[i] for i in rows])
        record.metadata.update((metadata or {}).get(Path(record.source).name, {}))
        index.replace_video(record, [segs[i] for i in rows], vectors[rows])


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_filters_select_exactly_the_matching_segments(tmp_path: Path, cache_dir: Path, segments, embedder,
                                                      backend: str) -> None:
    segs, vectors = segments
    with MediaIndex(_settings(tmp_path, cache_dir, backend), DIM, embedder.name) as index:
        _fill(index, segs, vectors)
        store = index.store
        assert store.count() == len(segs)
        jfk = next(s for s in segs if s.source.endswith("jfk.flac"))

        def expected(pred) -> int:
            return sum(1 for s in segs if pred(s))

        cases = [
            (SearchFilters(video_id=jfk.video_id), lambda s: s.video_id == jfk.video_id),
            (SearchFilters(source_prefix=str(Path(jfk.source).parent) + "/"), lambda s: "/audio/" in s.source),
            (SearchFilters(modality="ocr"), lambda s: s.modality == "ocr"),
            (SearchFilters(modality=("ocr", "visual")), lambda s: s.modality in {"ocr", "visual"}),
            (SearchFilters(modality="speech,visual"), lambda s: s.modality in {"speech", "visual"}),
            (SearchFilters(language="en"), lambda s: s.language == "en"),
            (SearchFilters(start=20.0, end=30.0), lambda s: s.end >= 20.0 and s.start <= 30.0),
            (SearchFilters(video_id=segs[0].video_id, start=80.0), lambda s: s.video_id == segs[0].video_id and s.end >= 80),
        ]
        query = embedder.embed_query("the communist party")
        for filters, pred in cases:
            n = expected(pred)
            assert 0 < n < len(segs), filters
            assert store.count(filters) == n, filters
            hits = store.search(query, limit=200, filters=filters)
            assert len(hits) == n, filters
            assert all(pred(Segment(h.video_id, h.source, h.start, h.end, h.modality, h.text, h.language))
                       for h in hits), filters
        stats = store.stats()
        assert stats["points"] == len(segs) and "words" in stats["vectors"]


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_metadata_filters_select_the_files_given_it(tmp_path: Path, cache_dir: Path, segments, embedder,
                                                    backend: str) -> None:
    """A file's metadata as a CSV manifest gives it (text), as a JSONL one does (numbers, lists, booleans) and as a
    download gives it; a value given as text finds either, text in any case, as the catalog's own check
    (`metadata_matches`) does."""
    segs, vectors = segments
    given = {"manifesto.mp4": {"title": "Manifesto", "year": "1848", "tags": ["politics", "history"],
                               "Read by": "A. Reader", "reviewed": True},
             "jfk.flac": {"year": 1961, "tags": "speech", "length": 12.5, "source_url": "https://example.org/jfk",
                          "reviewed": False, "parts": 1}}
    tagged = [Segment(**{**s.__dict__, "extra": dict(given.get(Path(s.source).name, {}))}) for s in segs]
    with MediaIndex(_settings(tmp_path, cache_dir, backend), DIM, embedder.name) as index:
        _fill(index, tagged, vectors, given)
        files = {Path(s.source).name for s in segs}

        def found(*pairs: tuple[str, str]) -> set[str]:
            filters = index.spelled(SearchFilters(metadata=pairs))
            hits = index.store.search(vectors[0], limit=200, filters=filters)
            assert len(hits) == index.store.count(filters)
            names = {Path(h.source).name for h in hits}
            assert names == {name for name in files if metadata_matches(given.get(name, {}), pairs)}, pairs
            return names

        assert len(files) > 2
        assert found(("tags", "history")) == found(("year", "1848")) == found(("Read by", "A. Reader")) \
            == {"manifesto.mp4"}
        assert found(("year", "1961")) == found(("year", "1961.0")) == found(("length", "12.5")) \
            == found(("source_url", "https://example.org/jfk")) == found(("tags", "speech")) == {"jfk.flac"}
        assert found(("tags", "politics"), ("title", "Manifesto")) == {"manifesto.mp4"}
        assert found(("tags", "politics"), ("year", "1961")) == set()
        # Text in any case, but whole: the engine is asked for each case the files spell it in.
        assert found(("title", "manifesto")) == found(("tags", "HISTORY")) == found(("Read by", "a. reader")) \
            == {"manifesto.mp4"}
        assert found(("read by", "A. Reader")) == set()  # a key is a name, matched as written
        assert found(("source_url", "HTTPS://EXAMPLE.ORG/JFK")) == {"jfk.flac"}
        assert found(("title", "Manifest")) == found(("year", "1962")) == found(("nowhere", "1")) == set()
        assert found(("year", "nan")) == found(("year", "inf")) == set()
        # A boolean is asked for as "true" or "false" (any case); true is not 1, nor 1 true.
        assert found(("reviewed", "true")) == found(("reviewed", "True")) == {"manifesto.mp4"}
        assert found(("reviewed", "false")) == {"jfk.flac"}
        assert found(("reviewed", "1")) == found(("parts", "true")) == set()
        assert found(("parts", "1")) == {"jfk.flac"}
        # A key taken away (a manifest's null) matches nothing, and is gone from the file's entry.
        jfk = next(s.video_id for s in segs if s.source.endswith("jfk.flac"))
        index.add_metadata(jfk, {"reviewed": None, "year": 1961})
        del given["jfk.flac"]["reviewed"]
        assert found(("reviewed", "false")) == set() and found(("year", "1961")) == {"jfk.flac"}
        record = index.catalog.get(jfk)
        assert record is not None and "reviewed" not in record.metadata


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_replacing_a_file_never_duplicates_and_removing_it_leaves_the_rest(
    tmp_path: Path, cache_dir: Path, segments, embedder, backend: str
) -> None:
    segs, vectors = segments
    refs = [i for i, s in enumerate(segs) if s.source.endswith("jfk.flac")]
    with MediaIndex(_settings(tmp_path, cache_dir, backend), DIM, embedder.name) as index:
        _fill(index, segs, vectors)
        jfk = [segs[i] for i in refs]
        for _ in range(2):
            index.replace_video(_record(jfk), jfk, vectors[refs])
        assert index.store.count() == len(segs)
        # The same source with new content: the old points go, the new ones come.
        changed = [Segment("newcontent", s.source, s.start, s.end, s.modality, s.text, s.language) for s in jfk[:1]]
        index.replace_video(_record(changed), changed, vectors[refs[:1]])
        assert index.store.count(SearchFilters(video_id=jfk[0].video_id)) == 0
        assert index.store.count() == len(segs) - len(jfk) + 1
        assert index.catalog.by_source(jfk[0].source).video_id == "newcontent"
        index.remove_video("newcontent")
        assert index.store.count() == len(segs) - len(jfk)
        assert index.catalog.get("newcontent") is None


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_a_moved_file_keeps_its_segments_under_its_new_path(tmp_path: Path, cache_dir: Path, segments, embedder,
                                                            backend: str) -> None:
    segs, vectors = segments
    refs = [i for i, s in enumerate(segs) if s.source.endswith("jfk.flac")]
    moved = str(tmp_path / "elsewhere" / "kennedy.flac")
    with MediaIndex(_settings(tmp_path, cache_dir, backend), DIM, embedder.name) as index:
        _fill(index, segs, vectors)
        video_id = segs[refs[0]].video_id
        before = index.store.segments_of(video_id)
        index.move_video(video_id, moved, 7)
        after = index.store.segments_of(video_id)
        assert [p["source"] for p in after] == [moved] * len(refs)
        assert [{**p, "source": None} for p in after] == [{**p, "source": None} for p in before]
        assert index.store.count(SearchFilters(source_prefix=str(tmp_path / "elsewhere"))) == len(refs)
        record = index.catalog.get(video_id)
        assert (record.source, record.mtime_ns) == (moved, 7) and index.catalog.by_source(moved) == record
        assert index.store.count() == len(segs)


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_vectors_that_do_not_fit_are_refused_before_writing(tmp_path: Path, cache_dir: Path, segments, embedder,
                                                           backend: str) -> None:
    segs, vectors = segments
    with MediaIndex(_settings(tmp_path, cache_dir, backend), DIM, embedder.name) as index:
        index.store.upsert(segs[:3], vectors[:3])
        bad_nan = vectors[:3].copy()
        bad_nan[1, 5] = np.nan
        for bad, message in [(vectors[:2], "expected 3 text vectors"), (vectors[:3, :100], "384 dimensions"),
                             (bad_nan, "NaN")]:
            with pytest.raises(ValueError, match=message):
                index.store.upsert(segs[:3], bad)
        wrong_extra = [Segment(**{**segs[0].__dict__, "vectors": {"text": [0.1] * 5}})]
        with pytest.raises(ValueError, match="dimensions"):
            index.store.upsert(wrong_extra, vectors[:1])
        with pytest.raises(ValueError, match="no 'image' vectors"):
            index.store.search(vectors[0], limit=3, using="image")
        assert index.store.count() == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"modality": "audio"}, "unknown modality audio"),
        ({"modality": ""}, "unknown modality"),
        ({"video_id": ""}, "video_id must be a non-empty string"),
        ({"source_prefix": 5}, "source_prefix must be a non-empty string"),
        ({"start": -1}, "start must be a time"),
        ({"end": float("nan")}, "end must be a time"),
        ({"start": "10"}, "start must be a time"),
        ({"start": 10, "end": 5}, "ends (5) before it starts (10)"),
        ({"metadata": (("", "x"),)}, "metadata key '' must be 1 to 200 characters"),
        ({"metadata": (('a"b', "x"),)}, "without quotes"),
        ({"metadata": (("a=b", "x"),)}, "without quotes, '=', backslashes"),
        ({"metadata": (("a\nb", "x"),)}, "control characters"),
        ({"metadata": (("k" * 201, "x"),)}, "1 to 200 characters"),
        ({"metadata": (("tags", " "),)}, "metadata 'tags' needs a value of 1 to 1000 characters"),
        ({"metadata": (("tags", "x" * 1001),)}, "needs a value"),
        ({"metadata": (("tags", "a"), ("tags", "b"))}, "metadata 'tags' is given twice"),
        ({"metadata": (("tags",),)}, "a metadata filter is a key and a value"),
        ({"metadata": [("tags", "a")]}, "metadata filters are (key, value) pairs"),
    ],
)
def test_bad_filters_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SearchFilters(**kwargs)


def test_edge_index_persists_and_gains_new_named_vectors(tmp_path: Path, cache_dir: Path, segments, embedder) -> None:
    segs, vectors = segments
    settings = _settings(tmp_path, cache_dir, "edge")
    with MediaIndex(settings, DIM, embedder.name, extra_dims={}) as index:  # no vision model yet
        _fill(index, segs[:5], vectors[:5])
    # A vision model configured later adds its vectors to the same index; old points stay.
    with MediaIndex(settings, DIM, embedder.name, extra_dims={"frame": 8}) as index:
        assert index.store.count() == 5
        assert {"video_id", "modality", "language", "start", "source"} <= set(index.store.stats()["payload_indexes"])
        framed = [Segment(**{**segs[5].__dict__, "vectors": {"frame": [0.0] * 7 + [1.0]}})]
        index.store.upsert(framed, vectors[5:6])
        hits = index.store.search(np.array([0.0] * 7 + [1.0]), limit=3, using="frame")
        assert [h.text for h in hits] == [segs[5].text]
    schema = json.loads((settings.index_dir / "schema.json").read_text())
    assert schema["extra_vectors"] == {"frame": 8} and schema["schema_version"] == 2
    with pytest.raises(IndexSchemaError, match="8-d 'frame' vectors"):
        MediaIndex(settings, DIM, embedder.name, extra_dims={"frame": 16})


def test_other_schema_versions_embedders_and_backends_are_refused(tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = _settings(tmp_path, cache_dir, "edge")
    MediaIndex(settings, DIM, embedder.name).close()
    schema_file = settings.index_dir / "schema.json"
    good = schema_file.read_text()
    with pytest.raises(IndexSchemaError, match="built with the text embedder"):
        MediaIndex(settings, 768, "another-model")
    server = _settings(tmp_path, cache_dir, "server")
    with pytest.raises(IndexSchemaError, match="configure the same index backend"):
        MediaIndex(server, DIM, embedder.name)
    schema_file.write_text(json.dumps({**json.loads(good), "schema_version": 1}))
    with pytest.raises(IndexSchemaError, match=r"schema version 1, this program needs 2: run `mediaindex index reset"):
        MediaIndex(settings, DIM, embedder.name)
    schema_file.write_text("{not json")
    with pytest.raises(IndexSchemaError, match="unreadable"):
        MediaIndex(settings, DIM, embedder.name)
    assert schema_file.read_text() == "{not json"  # never rewritten behind the user's back


def test_corrupt_index_files_give_a_clear_error_and_stay_untouched(tmp_path: Path, cache_dir: Path, segments,
                                                                   embedder) -> None:
    segs, vectors = segments
    settings = _settings(tmp_path, cache_dir, "edge")
    with MediaIndex(settings, DIM, embedder.name) as index:
        index.replace_video(_record(segs[:4]), segs[:4], vectors[:4])
    catalog = settings.index_dir / "catalog.db"
    saved = catalog.read_bytes()
    catalog.write_bytes(b"this is not a database" * 100)
    with pytest.raises(IndexCorruptError, match="catalog .* cannot be read.*index reset"):
        MediaIndex(settings, DIM, embedder.name)
    catalog.write_bytes(saved)

    qdrant = settings.index_dir / "qdrant"
    files = sorted(p for p in qdrant.rglob("*") if p.is_file() and p.stat().st_size > 0)
    for f in files:
        f.write_bytes(b"\x00garbage" * 64)
    before = {f: f.read_bytes() for f in files}
    with pytest.raises(IndexCorruptError, match="vector store .* cannot be read.*index reset"):
        MediaIndex(settings, DIM, embedder.name)
    assert {f: f.read_bytes() for f in files} == before

    other = _settings(tmp_path / "other", cache_dir, "edge")
    MediaIndex(other, DIM, embedder.name).close()
    shutil.rmtree(other.index_dir / "qdrant")
    (other.index_dir / "qdrant").write_text("not a folder")
    with pytest.raises(IndexCorruptError, match="is a file"):
        MediaIndex(other, DIM, embedder.name)


def test_server_backend_needs_a_reachable_url(tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / "a", cache_dir, index={"backend": "server"})
    with pytest.raises(ConfigError, match="index.url is not set"):
        MediaIndex(settings, DIM, embedder.name)
    settings = make_settings(tmp_path / "b", cache_dir,
                             index={"backend": "server", "url": "http://127.0.0.1:9", "timeout": 2})
    with pytest.raises(ServerUnavailableError, match="cannot use the Qdrant collection 'mediaindex' at http://127.0.0.1:9"):
        MediaIndex(settings, DIM, embedder.name)


def test_optimize_is_explicit_and_search_works_before_and_after(tmp_path: Path, cache_dir: Path, segments,
                                                               embedder) -> None:
    segs, vectors = segments
    with MediaIndex(_settings(tmp_path, cache_dir, "edge"), DIM, embedder.name) as index:
        _fill(index, segs, vectors)
        query = embedder.embed_query("workers of the world unite")
        before = [h.text for h in index.store.search(query, limit=5)]
        assert isinstance(index.store.optimize(), bool)
        assert [h.text for h in index.store.search(query, limit=5)] == before
        assert index.store.count() == len(segs)


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ({"backend": "cloud"}, "index.backend"),
        ({"dense_floor": 0.9, "dense_ceiling": 0.8}, "must be below dense_ceiling"),
        ({"hnsw_threshold": 10}, "index.hnsw_threshold"),
        ({"candidates": 0}, "index.candidates"),
        ({"rrf_k": 0}, "index.rrf_k"),
        ({"colection": "x"}, "index.colection"),
    ],
)
def test_bad_index_settings_are_refused(index: dict, message: str) -> None:
    from mediaindex.config import load_settings

    with pytest.raises(ConfigError, match=message):
        load_settings("cpu", index=index)


def test_server_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from mediaindex.config import load_settings

    monkeypatch.setenv("MEDIAINDEX_INDEX__BACKEND", "server")
    monkeypatch.setenv("MEDIAINDEX_INDEX__URL", "https://qdrant.example:6333")
    monkeypatch.setenv("MEDIAINDEX_INDEX__API_KEY", "secret")
    cfg = load_settings("cpu").index
    assert (cfg.backend, cfg.url, cfg.api_key) == ("server", "https://qdrant.example:6333", "secret")


def test_server_collection_is_reused_and_checked(tmp_path: Path, cache_dir: Path, segments, embedder) -> None:
    from mediaindex.index.server_store import ServerStore

    segs, vectors = segments
    url = f"local:{tmp_path / 'qdrant-server'}"
    store = ServerStore(url, "media", {"text": DIM})
    store.upsert(segs[:4], vectors[:4])
    store.close()
    store = ServerStore(url, "media", {"text": DIM})
    assert store.count() == 4
    store.close()
    with pytest.raises(IndexSchemaError, match=r"lacks the vectors image \(512-d\)"):
        ServerStore(url, "media", {"text": DIM, "image": 512})
