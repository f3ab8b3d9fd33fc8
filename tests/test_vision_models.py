"""The vision models over real pictures: classifier labels, OCR, word splitting, image input checks."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mediaindex.config import VisionSettings, load_settings
from mediaindex.errors import ConfigError, ModelLoadError
from mediaindex.models.images import ImageInputError, check_image, difference_hash, hash_distance, load_image
from mediaindex.models.vision import FRAME_VECTOR, load_classifier, load_text_reader, vector_dims
from mediaindex.models.wordsplit import normalise_text
from tests.conftest import frame_at, media


@pytest.fixture(scope="module")
def classifier():
    return load_classifier(VisionSettings())


@pytest.fixture(scope="module")
def reader():
    return load_text_reader(VisionSettings())


def _top(classifier, image: np.ndarray, k: int = 5) -> list[str]:
    from mediaindex.models.imagenet_labels import LABELS

    probs = classifier.probabilities([image])[0]
    return [LABELS[i] for i in np.argsort(-probs)[:k]]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("images/skimage_chelsea.png", {"tabby cat", "tiger cat", "Egyptian Mau", "Persian cat", "Siamese cat"}),
        ("images/skimage_coffee.png", {"espresso", "cup", "coffee mug"}),
        ("images/skimage_rocket.jpg", {"missile", "projectile", "space shuttle"}),
    ],
)
def test_classifier_names_what_is_in_the_picture(classifier, name: str, expected: set[str]) -> None:
    image = load_image(media(name))
    assert _top(classifier, image, k=2)[0] in expected
    pred = classifier.predict([image])[0]
    assert pred.labels and pred.labels[0][0] in expected
    assert pred.feature.shape == (vector_dims(VisionSettings())[FRAME_VECTOR],)
    assert np.isclose(np.linalg.norm(pred.feature), 1.0, atol=1e-4)


def test_classifier_description_adds_the_broad_kind(classifier) -> None:
    pred = classifier.predict([load_image(media("images/skimage_chelsea.png"))])[0]
    # Near-equal cat classes lead in turn; a breed's name goes without an article.
    opening = {"tiger cat": "a photo of a tiger cat", "tabby cat": "a photo of a tabby cat",
               "Egyptian Mau": "a photo of Egyptian Mau"}[pred.labels[0][0]]
    assert pred.description().startswith(opening) and pred.description().endswith(", a cat")


def test_batched_and_single_predictions_agree(classifier) -> None:
    images = [load_image(media(f"images/{n}")) for n in ("skimage_chelsea.png", "skimage_coffee.png", "skimage_rocket.jpg")]
    batch = classifier.features(images)
    for image, row in zip(images, batch, strict=True):
        assert np.allclose(classifier.features([image])[0], row, atol=1e-4)
    assert float(batch[0] @ batch[1]) < 0.9  # different pictures, different features


def test_the_whole_view_is_the_centre_crop_and_both_ends_of_the_longer_side() -> None:
    from mediaindex.models.classifier import INPUT_SIZE, image_views
    from mediaindex.models.images import resize_center_crop

    wide = frame_at("video/cockatoo.mp4", 1.0)
    assert wide.shape[1] > wide.shape[0]
    assert len(image_views(wide, "centre")) == 1
    centre, left, right = image_views(wide, "whole")
    assert np.array_equal(centre, resize_center_crop(wide, INPUT_SIZE))
    side = round(wide.shape[1] * INPUT_SIZE / wide.shape[0])
    scaled = np.asarray(Image.fromarray(wide).resize((side, INPUT_SIZE), Image.Resampling.BICUBIC))
    assert np.array_equal(left, scaled[:, :INPUT_SIZE]) and np.array_equal(right, scaled[:, -INPUT_SIZE:])
    tall = np.ascontiguousarray(np.rot90(wide))
    _, top, bottom = image_views(tall, "whole")
    assert top.shape == bottom.shape == (INPUT_SIZE, INPUT_SIZE, 3) and not np.array_equal(top, bottom)


def test_the_whole_view_names_what_stands_at_a_wide_frames_edge(classifier) -> None:
    """A cup at the left end of a wide frame (the rest a blank wall) is missed by the centre crop alone."""
    from mediaindex.models.classifier import ImageClassifier

    cup = np.asarray(Image.fromarray(load_image(media("images/skimage_coffee.png"))).resize((300, 300)))
    frame = np.full((300, 900, 3), 200, np.uint8)
    frame[:, :300] = cup
    centre = ImageClassifier(view="centre")
    drinks = {"espresso", "cup", "coffee mug"}
    assert not drinks & set(_top(centre, frame, k=5))
    assert drinks & set(_top(classifier, frame, k=5))
    # The picture's feature (image search) stays its centre crop's, whatever the classifier sees.
    assert np.allclose(classifier.features([frame]), centre.features([frame]), atol=1e-5)
    probs = classifier.probabilities([frame])[0]
    assert np.isclose(probs.sum(), 1.0, atol=1e-4)


@pytest.mark.parametrize(("kernel", "stride"), [(3, 1), (5, 1), (3, 2), (5, 2), (1, 1)])
@pytest.mark.parametrize("side", [224, 112, 57, 7])
def test_same_padding_read_by_the_convolution_is_tfs_explicit_padding(kernel: int, stride: int, side: int) -> None:
    import math

    import torch
    import torch.nn.functional as F

    from mediaindex.models.efficientnet_lite import SameConv2d

    torch.manual_seed(0)
    conv = SameConv2d(8, 8, kernel, stride=stride, groups=8, bias=True).eval()
    picture = load_image(media("images/skimage_chelsea.png"))[:side, :side].astype(np.float32)
    x = torch.from_numpy(np.tile(picture, (1, 1, 3))[:, :, :8]).permute(2, 0, 1)[None].sub(127).div(128)
    x = x.contiguous(memory_format=torch.channels_last)
    total = max((math.ceil(side / stride) - 1) * stride + kernel - side, 0)
    pads = [total // 2, total - total // 2] * 2  # TF "SAME": the odd pixel after
    with torch.inference_mode():
        expected = F.conv2d(F.pad(x, pads), conv.weight, conv.bias, conv.stride, 0, 1, conv.groups)
        got = conv(x)
    assert got.shape == expected.shape == (1, 8, math.ceil(side / stride), math.ceil(side / stride))
    assert torch.allclose(got, expected, atol=1e-5)


def test_ocr_reads_the_page_title(reader) -> None:
    lines = reader.read(load_image(media("images/skimage_page.png")))
    assert lines[0].text == "Region-based segmentation"
    assert lines[0].confidence > 0.9
    assert any("markers" in ln.text for ln in lines[1:])


def test_ocr_reads_a_stylised_two_line_title() -> None:
    # "Big Buck / BUNNY": the detector joins the two stacked lines (their letters touch) into one
    # box that reads as one garbled word ("BORKSY"); the box is then read again as two lines.
    # PP-OCRv4 reads both lines so; PP-OCRv5 reads "BigBuek" (tests/test_ocr_models.py).
    reader = load_text_reader(VisionSettings(ocr_model="ppocrv4"))
    for t in (27.0, 29.0):
        lines = reader.read(frame_at("video/big_buck_bunny_0_30.webm", t))
        words = {w.lower() for ln in lines for w in ln.text.split()}
        assert {"big", "buck", "bunny"} <= words, (t, lines)
        assert all(ln.confidence >= 0.85 for ln in lines)


def test_ocr_keeps_one_line_boxes_whole(reader) -> None:
    # A one-line caption read with middling confidence is not cut into two lines.
    lines = reader.read(frame_at("video/manifesto.mp4", 10.0))
    assert [ln.text for ln in lines if "Manifesto" in ln.text or "Party" in ln.text] == [
        "Manifesto of the", "Communist Party"]
    assert any(ln.text.startswith("by Karl Marx") for ln in lines)


def test_ocr_finds_nothing_in_a_picture_without_text(reader) -> None:
    assert reader.read(load_image(media("images/skimage_chelsea.png"))) == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Manifestoofthe", "Manifesto of the"),
        ("CommunistParty", "Communist Party"),
        ("byKarl Marx&Friedrich Engels", "by Karl Marx & Friedrich Engels"),
        ("THEPEACH OPENMOVIE PROJECT", "THE PEACH OPEN MOVIE PROJECT"),
        # Real words, names and misreads stay as they are.
        ("classifier", "classifier"),
        ("Region-based segmentation", "Region-based segmentation"),
        ("BORKSY", "BORKSY"),
        ("01:00:04:29", "01:00:04:29"),
        ("Straße Köln", "Straße Köln"),
    ],
)
def test_run_together_words_are_split(raw: str, expected: str) -> None:
    assert normalise_text(raw) == expected


# --- bad or unusual image input: a clear error or a correct result -------------------------------


def test_corrupt_and_non_image_files_are_refused(tmp_path) -> None:
    data = media("images/skimage_chelsea.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 3])
    (tmp_path / "text.png").write_text("not a picture")
    (tmp_path / "empty.jpg").write_bytes(b"")
    for name in ("cut.png", "text.png", "empty.jpg"):
        with pytest.raises(ImageInputError, match="not a readable image"):
            load_image(tmp_path / name)
    with pytest.raises(ImageInputError, match="not found"):
        load_image(tmp_path / "missing.png")


def test_one_pixel_image_is_refused_as_too_small(tmp_path) -> None:
    Image.new("RGB", (1, 1), (200, 10, 10)).save(tmp_path / "dot.png")
    with pytest.raises(ImageInputError, match="1x1 pixels is too small"):
        load_image(tmp_path / "dot.png")


def test_sixteen_bit_grayscale_keeps_its_contrast(tmp_path, classifier) -> None:
    gray8 = np.asarray(Image.open(media("images/skimage_camera.png")).convert("L"))
    Image.fromarray(gray8.astype(np.uint16) * 257).save(tmp_path / "camera16.png")
    assert Image.open(tmp_path / "camera16.png").mode.startswith("I")
    rgb = load_image(tmp_path / "camera16.png")
    assert rgb.dtype == np.uint8 and rgb.shape == (*gray8.shape, 3)
    assert np.abs(rgb[:, :, 0].astype(int) - gray8).max() <= 1  # scaled, not clipped to white
    assert classifier.predict([rgb])[0].feature.shape == (1280,)


def test_alpha_channel_is_composited_on_white(tmp_path, classifier) -> None:
    rgb = np.asarray(Image.open(media("images/skimage_chelsea.png")).convert("RGB"))
    alpha = np.full(rgb.shape[:2], 255, np.uint8)
    alpha[:20, :] = 0  # a transparent band at the top
    Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(tmp_path / "chelsea_alpha.png")
    loaded = load_image(tmp_path / "chelsea_alpha.png")
    assert loaded.shape == rgb.shape
    assert (loaded[:20] == 255).all() and np.array_equal(loaded[20:], rgb[20:])
    assert "cat" in classifier.predict([loaded])[0].description()


def test_arrays_are_checked_and_converted() -> None:
    with pytest.raises(ImageInputError, match="shape"):
        check_image(np.zeros((32, 32, 5), np.uint8))
    with pytest.raises(ImageInputError, match="too small"):
        check_image(np.zeros((0, 0, 3), np.uint8))
    assert check_image(np.ones((16, 16), np.float32)).max() == 255  # float in [0, 1]
    assert check_image(np.zeros((16, 16, 4), np.uint8))[0, 0].tolist() == [255, 255, 255]  # transparent


def test_near_identical_frames_hash_close() -> None:
    image = load_image(media("images/skimage_coffee.png"))
    noisy = np.clip(image.astype(int) + np.random.default_rng(0).integers(-6, 7, image.shape), 0, 255).astype(np.uint8)
    other = load_image(media("images/skimage_rocket.jpg"))
    assert hash_distance(difference_hash(image), difference_hash(noisy)) < 0.1
    assert hash_distance(difference_hash(image), difference_hash(other)) > 0.3


def test_bad_vision_settings_are_refused(monkeypatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_VISION__LABEL_THRESHOLD", "2")
    with pytest.raises(ConfigError, match="label_threshold"):
        load_settings("cpu")
    monkeypatch.delenv("MEDIAINDEX_VISION__LABEL_THRESHOLD")
    monkeypatch.setenv("MEDIAINDEX_VISION__CLASSIFIER_VIEW", "sides")
    with pytest.raises(ConfigError, match="classifier_view"):
        load_settings("cpu")
    from mediaindex.models.classifier import ImageClassifier

    with pytest.raises(ModelLoadError, match="unknown classifier view 'sides'"):
        ImageClassifier(view="sides")  # type: ignore[arg-type]
    with pytest.raises(ModelLoadError, match="unknown image classifier"):
        vector_dims(VisionSettings(classifier="resnet-9000"))
    with pytest.raises(ModelLoadError, match="does not exist"):
        vector_dims(VisionSettings(clip="./no/such/clip-model"))
    assert vector_dims(VisionSettings(enabled=False)) == {}


def test_exif_orientation_is_applied(tmp_path) -> None:
    upright = Image.open(media("images/skimage_chelsea.png")).convert("RGB")
    sideways = upright.transpose(Image.Transpose.ROTATE_90)  # stored turned, tagged to be turned back
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    sideways.save(tmp_path / "photo.jpg", exif=exif.tobytes(), quality=95)
    loaded = load_image(tmp_path / "photo.jpg")
    assert loaded.shape == (upright.height, upright.width, 3)
    assert np.abs(loaded.astype(int) - np.asarray(upright, dtype=int)).mean() < 8


def test_ocr_sessions_do_not_spin(reader) -> None:
    """PP-OCRv5's ONNX Runtime sessions: one thread between operators, and workers that sleep instead of
    spinning (spinning held cores the stages beside OCR needed)."""
    ocr = reader._engine._ocr
    for model in (ocr.text_detector, ocr.text_recognizer):
        options = model.session.get_session_options()
        assert options.inter_op_num_threads == 1
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
