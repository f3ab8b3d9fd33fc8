"""Faces and people: MediaPipe's detectors over real pictures and frames, their files checked, broken ones refused."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mediaindex.errors import ModelLoadError
from mediaindex.models.bundled import MEDIAPIPE_DETECTORS, WheelFiles, extract_wheel_files
from mediaindex.models.images import ImageInputError
from mediaindex.models.people import FACE, PERSON, People, PeopleDetector, anchors, detector_dir, suppress
from tests.conftest import frame_at, media


@pytest.fixture(scope="module")
def detector(cache_dir: Path) -> PeopleDetector:
    return PeopleDetector(detector_dir(cache_dir))


def _picture(rel: str) -> np.ndarray:
    return np.asarray(Image.open(media(rel)).convert("RGB"))


def test_anchor_grids_are_mediapipes() -> None:
    # BlazeFace full range: one anchor per cell of a 48 x 48 grid; BlazePose: 28², 14² and 7² grids, the last
    # three layers sharing one (2 + 2 + 6 anchors per cell).
    assert len(anchors(FACE)) == 48 * 48
    assert len(anchors(PERSON)) == 28 * 28 * 2 + 14 * 14 * 2 + 7 * 7 * 6
    assert np.allclose(anchors(FACE)[0], [0.5 / 48, 0.5 / 48]) and np.allclose(anchors(FACE)[1], [1.5 / 48, 0.5 / 48])


def test_the_astronaut_is_a_person_with_a_face(detector: PeopleDetector) -> None:
    seen = detector.people(_picture("images/skimage_astronaut.png"))
    assert (seen.faces, seen.persons) == (1, 1) and seen.score > 0.8
    assert seen.description() == "a photo of a person" and seen.aliases() == ["Person", "Mensch", "사람"]


def test_the_archaeologists_at_their_table_are_people(detector: PeopleDetector) -> None:
    seen = detector.people(frame_at("video/issue-195-aspect-ratio.mp4", 11.9))
    assert seen.count >= 2 and seen.score > 0.8
    assert seen.description() in ("a photo of two people", "a photo of a group of people")
    assert "Menschen" in seen.aliases()


def test_a_man_in_the_old_film_is_found(detector: PeopleDetector) -> None:
    assert detector.people(frame_at("video/chaplin.mp4", 6.0)).persons >= 1


@pytest.mark.parametrize("rel", ["images/skimage_coffee.png", "images/skimage_horse.png", "images/skimage_coins.png"])
def test_pictures_without_anyone_name_no_one(detector: PeopleDetector, rel: str) -> None:
    seen = detector.people(_picture(rel))
    assert seen == People() and seen.description() == "" and seen.aliases() == []


def test_the_best_frame_describes_a_picture(detector: PeopleDetector) -> None:
    empty = _picture("images/skimage_coffee.png")
    person = _picture("images/skimage_astronaut.png")
    assert detector.best([empty, person, empty]) == detector.people(person)
    assert detector.best([]) == People()


@pytest.mark.parametrize("bad", [np.zeros((0, 0, 3), np.uint8), np.zeros((2, 64, 64, 3), np.uint8),
                                 np.zeros((64, 64, 2), np.uint8), np.zeros((1, 1, 3), np.uint8)])
def test_unusable_pictures_are_refused_clearly(detector: PeopleDetector, bad: np.ndarray) -> None:
    with pytest.raises(ImageInputError, match="expected an H x W x 3 image|too small"):
        detector.people(bad)


def test_grey_and_float_pictures_are_read_as_colour(detector: PeopleDetector) -> None:
    colour = _picture("images/skimage_astronaut.png")
    grey = np.asarray(Image.fromarray(colour).convert("L"))
    assert detector.people(grey).faces == 1
    assert detector.people(colour.astype(np.float32) / 255.0).faces == 1


def test_descriptions_count_people_by_faces_or_bodies() -> None:
    assert People(faces=0, persons=1, score=0.8).description() == "a photo of a person"
    assert People(faces=2, persons=1, score=0.9).description() == "a photo of two people"
    assert People(faces=3, persons=1, score=0.9).description() == "a photo of a group of people"
    assert People(faces=1, persons=2, score=0.9).names() == ["people"]


def test_overlapping_boxes_are_one_detection() -> None:
    boxes = np.array([[0.1, 0.1, 0.5, 0.5], [0.12, 0.1, 0.52, 0.5], [0.6, 0.6, 0.9, 0.9]])
    assert suppress(boxes, np.array([0.7, 0.9, 0.6])) == [1, 2]


def test_a_damaged_model_file_is_refused_and_named(cache_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "detectors"
    shutil.copytree(detector_dir(cache_dir), folder)
    model = folder / FACE.file
    model.write_bytes(model.read_bytes()[: 1000])
    with pytest.raises(ModelLoadError, match=r"damaged .*models fetch mediapipe-detectors"):
        PeopleDetector(folder)
    model.unlink()
    with pytest.raises(ModelLoadError, match=r"cannot read .*models fetch mediapipe-detectors"):
        PeopleDetector(folder)


def test_detectors_never_fetched_name_the_command(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"models fetch mediapipe-detectors.*vision.people: false"):
        detector_dir(tmp_path)


def _spec_for(wheel: Path) -> WheelFiles:
    return WheelFiles(MEDIAPIPE_DETECTORS.name, MEDIAPIPE_DETECTORS.requirement, wheel.name, (),
                      MEDIAPIPE_DETECTORS.files)


def test_files_are_copied_from_the_wheel_and_checked(cache_dir: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / MEDIAPIPE_DETECTORS.wheel
    with zipfile.ZipFile(wheel, "w") as archive:  # a wheel holding just the two files, as the real one does
        for member, _ in MEDIAPIPE_DETECTORS.files:
            archive.write(detector_dir(cache_dir) / Path(member).name, member)
    folder = extract_wheel_files(MEDIAPIPE_DETECTORS, tmp_path / "cache", wheels)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".assembled", *(Path(m).name for m, _ in MEDIAPIPE_DETECTORS.files)])
    assert wheel.is_file()  # the caller's wheel is left where it was
    PeopleDetector(detector_dir(tmp_path / "cache"))


def test_a_wrong_or_broken_wheel_is_refused(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / MEDIAPIPE_DETECTORS.wheel
    wheel.write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="unreadable or not the expected wheel"):
        extract_wheel_files(_spec_for(wheel), tmp_path / "cache", wheels)
    with zipfile.ZipFile(wheel, "w") as archive:  # the right names, other bytes
        for member, _ in MEDIAPIPE_DETECTORS.files:
            archive.writestr(member, b"\0" * 4096)
    with pytest.raises(ModelLoadError, match="has SHA-256 .* expected"):
        extract_wheel_files(_spec_for(wheel), tmp_path / "cache", wheels)
    assert not (tmp_path / "cache" / MEDIAPIPE_DETECTORS.name).exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # no staging folder left behind


def test_switched_on_without_its_files_names_the_fetch(tmp_path: Path) -> None:
    from mediaindex.config import VisionSettings
    from mediaindex.models.vision import load_people

    assert load_people(VisionSettings(), tmp_path) is None  # off by default: nothing is looked for
    with pytest.raises(ModelLoadError, match="models fetch mediapipe-detectors"):
        load_people(VisionSettings(people=True), tmp_path)


@pytest.mark.parametrize("value", ["maybe", 2, [True]])
def test_a_setting_that_is_not_a_yes_or_no_is_refused(value: object) -> None:
    from pydantic import ValidationError

    from mediaindex.config import VisionSettings

    with pytest.raises(ValidationError, match="people"):
        VisionSettings(people=value)
