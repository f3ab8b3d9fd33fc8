"""The CLIP path on a small random-initialised model saved and loaded like a real checkpoint:
shapes, normalisation, batching, the stage, the store and both query directions."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest

from mediaindex.config import Settings, VisionSettings
from mediaindex.errors import ModelLoadError
from mediaindex.index.index import MediaIndex
from mediaindex.models.images import load_image
from mediaindex.models.vision import FRAME_VECTOR, IMAGE_VECTOR, load_clip, vector_dims
from mediaindex.pipeline.stages.decode import decode_media
from mediaindex.pipeline.stages.embed import EmbedStage
from mediaindex.pipeline.stages.vision import VisionStage
from mediaindex.pipeline.write import write_item
from mediaindex.search.features import PICTURE_NAMES
from mediaindex.search.relevance import LEVELS, RelevanceModel, load_picture_model
from mediaindex.search.searcher import PICTURE_MATCH, Searcher, judged
from tests.conftest import make_settings, media

PROJECTION = 24


def _tiny_clip(target: Path) -> Path:
    """A CLIP checkpoint directory (config, weights, tokenizer, image processor) with random weights."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    target.mkdir(parents=True)
    # A real byte-pair vocabulary, just a small one: characters, a few merges, the special tokens.
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    merges = ["t h", "th e</w>", "a n", "an d</w>"]
    tokens = chars + [c + "</w>" for c in chars] + [m.replace(" ", "") for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    (target / "vocab.json").write_text(json.dumps(vocab))
    (target / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tokenizer = CLIPTokenizer(str(target / "vocab.json"), str(target / "merges.txt"))
    eos = vocab["<|endoftext|>"]
    config = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=32, bos_token_id=vocab["<|startoftext|>"],
                         eos_token_id=eos, pad_token_id=eos),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=PROJECTION,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(target)
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
    )
    processor.save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_clip(tmp_path_factory.mktemp("clip") / "tiny-clip")


@pytest.fixture(scope="module")
def clip_settings(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, clip_dir: Path) -> Settings:
    # OCR is not what this module tests; it is left off to keep the run short.
    return make_settings(tmp_path_factory.mktemp("clip-index"), cache_dir,
                         vision={"clip": str(clip_dir), "ocr": False, "batch_size": 2})


def test_dimension_is_read_from_the_config_alone(clip_dir: Path) -> None:
    assert vector_dims(VisionSettings(clip=str(clip_dir))) == {FRAME_VECTOR: 1280, IMAGE_VECTOR: PROJECTION}


def test_embeddings_are_normalised_and_batching_does_not_change_them(clip_settings: Settings) -> None:
    clip = load_clip(clip_settings.vision)
    images = [load_image(media(f"images/{n}")) for n in ("skimage_chelsea.png", "skimage_coffee.png", "skimage_rocket.jpg")]
    batched = clip.embed_images(images)  # batch_size 2: two batches
    assert batched.shape == (3, PROJECTION) and batched.dtype == np.float32
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert np.allclose(clip.embed_images(images[1:2])[0], batched[1], atol=1e-5)
    texts = clip.embed_texts(["a cat", "the coffee and the cup"])
    assert texts.shape == (2, PROJECTION)
    assert np.allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    assert clip is load_clip(clip_settings.vision)  # loaded once per process
    # A query longer than the text tower reads (this tokenizer was saved without a length of its own) is cut to it.
    long = clip.embed_query("a long description of a scene " * 40)
    assert long.shape == (PROJECTION,) and np.isfinite(long).all()


@pytest.mark.parametrize(("bits", "min_cosine"), [(8, 0.999), (4, 0.95)])
def test_both_towers_run_in_hqq_through_the_serving_quantizer(clip_settings: Settings, bits: int,
                                                              min_cosine: float) -> None:
    import torch

    from mediaindex.serving.quant.layers import QuantLinear

    full = load_clip(clip_settings.vision)
    # Group 32: the tiny model's layers are 32 and 64 wide (real CLIP towers fit the default 64).
    quant = load_clip(clip_settings.vision.model_copy(update={"clip_bits": bits, "clip_group_size": 32}))
    assert quant is not full
    quantized = [n for n, m in quant.model.named_modules() if isinstance(m, QuantLinear)]
    assert {n.split(".")[0] for n in quantized} == {"text_model", "vision_model", "text_projection",
                                                   "visual_projection"}
    assert not [n for n, m in quant.model.named_modules() if type(m) is torch.nn.Linear]  # none left behind
    images = [load_image(media(f"images/{n}")) for n in ("skimage_chelsea.png", "skimage_rocket.jpg")]
    for a, b in ((full.embed_images(images), quant.embed_images(images)),
                 (full.embed_texts(["a cat", "a rocket"]), quant.embed_texts(["a cat", "a rocket"]))):
        assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
        assert (a * b).sum(axis=1).min() > min_cosine


def test_clip_quantization_settings_are_checked(clip_dir: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        VisionSettings(clip=str(clip_dir), clip_bits=3)
    with pytest.raises(ValidationError):
        VisionSettings(clip=str(clip_dir), clip_group_size=4)


def test_store_and_query_round_trip(clip_settings: Settings) -> None:
    stage, embed = VisionStage(clip_settings), EmbedStage(clip_settings)
    item = decode_media(str(media("video/testvideo.mp4")), clip_settings)
    pictures = [(k.time, k.image.copy()) for k in item.keyframes]
    item = embed.process(stage.process(item))
    visual = [s for s in item.segments if s.modality == "visual"]
    assert visual and all(len(s.vectors[IMAGE_VECTOR]) == PROJECTION for s in visual)
    assert all(len(s.vectors[FRAME_VECTOR]) == 1280 for s in visual)

    dims = vector_dims(clip_settings.vision)
    with MediaIndex(clip_settings, embed.embedder.dim, embed.embedder.name, extra_dims=dims) as index:
        assert write_item(index, item, {}).status == "indexed"
        # The CLIP vector alone (classifier off): a keyframe finds its own shot, near score 1.
        clip_only = clip_settings.vision.model_copy(update={"classifier": None})
        # Shot-aware keyframes can repeat a picture in different shots (testvideo.mp4 has black frames
        # at 6.0 s and 23.2 s): such a frame's "own shot" is any shot that shows the same picture.
        def same(a: np.ndarray, b: np.ndarray) -> bool:
            return a.shape == b.shape and float(np.abs(a.astype(np.float32) - b).mean()) < 2.0

        at = dict(pictures)
        for t, picture in pictures:
            hit = index.store.search(load_clip(clip_only).embed_images([picture])[0], 1, using=IMAGE_VECTOR)[0]
            assert hit.start <= t < hit.end or same(at[hit.start], picture), (t, hit)
            assert hit.score > 0.99
        # Both vectors together: the lists are fused by rank (for a picture that shows in one shot only).
        t, picture = next((t, p) for t, p in reversed(pictures) if sum(same(p, q) for q in at.values()) == 1)
        searcher = Searcher(index, embed.embedder, clip_settings.vision)
        fused = searcher.image(picture, limit=3)
        assert fused[0].start <= t < fused[0].end and fused[0].modality == "visual"
        # A picture alone has no fitted model: its score is its picture similarity.
        alone = judged(index, None, None, 1, image_vectors={"frame": stage.classifier.features([picture])[0]})[0]
        assert fused[0].band is None and fused[0].score >= PICTURE_MATCH and alone.probability >= PICTURE_MATCH
        # Text through the CLIP text tower meets the image vectors: a random model's shots join the candidates,
        # and the relevance model decides on them as on any candidate.
        clip = load_clip(clip_settings.vision)
        found = judged(index, embed.embedder, "a cat", 20, clip_query=clip.embed_query)
        assert any(j.hit.modality == "visual" for j in found) and all(0.0 <= j.probability <= 1.0 for j in found)
        assert all(h.band is not None for h in searcher.text("a cat", limit=5))

        # Shots without words are judged among the query's shots (none of these shows a cat), and a picture model
        # fitted for this CLIP model judges the shots the text tower meets. This one trusts the shot nearest the
        # query alone (clip_lead 0).
        def unnamed(found: list) -> list[float]:
            return [j.probability for j in found if j.hit.modality == "visual" and not j.hit.text]

        assert unnamed(found) and all(0.0 < p < LEVELS["low"] for p in unnamed(found))
        model_file = clip_settings.index_dir / "picture-model.json"
        model = RelevanceModel(PICTURE_NAMES, np.zeros(3), np.ones(3), np.array([0.0, 0.0, -40.0]), 2.0)
        model_file.write_text(json.dumps({"model": model.to_dict()}))
        pictures = load_picture_model(model_file)
        again = judged(index, embed.embedder, "a cat", 20, clip_query=clip.embed_query, picture_model=pictures)
        before = {(j.hit.video_id, j.hit.start, j.hit.modality): j.probability for j in found}
        assert all(j.probability >= before[(j.hit.video_id, j.hit.start, j.hit.modality)] for j in again)
        best = 1.0 / (1.0 + np.exp(-2.0))
        assert max(p for j in again if j.hit.modality == "visual" for p in [j.probability]) == pytest.approx(best)
        judged_by_picture = clip_settings.vision.model_copy(update={"clip_relevance": str(model_file)})
        top = Searcher(index, embed.embedder, judged_by_picture).text("a cat", limit=5, min_confidence="high")
        assert top and all(h.modality == "visual" and h.band == "high" for h in top), top


def test_bad_clip_models_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        vector_dims(VisionSettings(clip=str(tmp_path / "empty")))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read the config"):
        vector_dims(VisionSettings(clip=str(tmp_path / "bad")))


def test_a_wrong_picture_model_is_refused_with_its_file_named(tmp_path: Path, clip_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"cannot read the picture relevance model .*missing\.json"):
        load_picture_model(tmp_path / "missing.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"garbage\.json is not one .*fit_relevance\.py --pictures"):
        load_picture_model(garbage)
    text_model = tmp_path / "text-model.json"  # the text model's file is not a picture model
    text_model.write_text((Path(__file__).parents[1] / "mediaindex/search/relevance.json").read_text())
    with pytest.raises(ModelLoadError, match="refit it"):
        load_picture_model(text_model)
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"model": {"features": list(PICTURE_NAMES), "mean": [0], "scale": [1],
                                           "coef": [1], "intercept": 0}}))
    with pytest.raises(ModelLoadError, match="1 coefficients for 3 features"):
        load_picture_model(short)
    with pytest.raises(ValueError, match="set vision.clip too"):
        VisionSettings(clip_relevance=str(short))
    assert VisionSettings(clip=str(clip_dir), clip_relevance=str(short)).clip_relevance == str(short)
