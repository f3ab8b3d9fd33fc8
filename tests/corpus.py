"""Segments made from the reference transcripts that ship with the shared media (no Ray, no whisper).

Search tests need many real sentences with real timestamps; the captions and references in
../shared/media give them in a second, so the index and search code are tested on their own.
"""

from __future__ import annotations

import json
import re

from mediaindex.segments import Segment
from tests.conftest import media

# From MANIFEST.md: (file, start, end, reference transcript).
REFERENCES = [
    ("audio/jfk.flac", 0.0, 5.5, "And so my fellow Americans, ask not what your country can do for you,"),
    ("audio/jfk.flac", 5.5, 11.0, "ask what you can do for your country."),
    ("audio/2412-153948-0000.flac", 0.0, 11.7, "If the reader will excuse me I will say nothing of my antecedents nor "
     "of the circumstances which led me to leave my native country. The narrative would be tedious to him and "
     "painful to myself."),
    ("audio/LJ002-0020.wav", 0.0, 1.5, "In 1813"),
    ("audio/LJ002-0035.wav", 0.0, 1.6, "Eight, the press yard."),
    ("audio/english.wav", 0.0, 2.7, "One, two, three."),
    ("audio/stereo_diarization.wav", 0.0, 5.0, "He began a confused complaint against the wizard, who had "
     "vanished behind the curtain on the left."),
    ("audio/stereo_diarization.wav", 0.0, 5.0, "The horizon seems extremely distant."),
]


def _srt_time(stamp: str) -> float:
    h, m, rest = stamp.split(":")
    s, ms = rest.split(",")
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def video_id(rel: str) -> str:
    return re.sub(r"\W", "", rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]).lower()[:16]


def manifesto() -> list[Segment]:
    path = media("video/manifesto.mp4")
    text = media("groundtruth/manifesto.srt").read_text(encoding="utf-8")
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.strip().splitlines()
        start, end = (_srt_time(t.strip()) for t in lines[1].split("-->"))
        out.append(Segment(video_id("manifesto"), str(path), start, end, "speech", " ".join(lines[2:]), "en"))
    return out


def apollo() -> list[Segment]:
    path = media("audio/apollo11.mp3")
    data = json.loads(media("groundtruth/apollo11.whisper-large.words.json").read_text(encoding="utf-8"))
    return [Segment(video_id("apollo11"), str(path), float(s["start"]), float(s["end"]), "speech",
                    s["text"].strip(), "en") for s in data["segments"]]


def references() -> list[Segment]:
    return [Segment(video_id(rel), str(media(rel)), start, end, "speech", text, "en")
            for rel, start, end, text in REFERENCES]


def corpus() -> dict[str, list[Segment]]:
    """Segments grouped by video id, in time order."""
    groups: dict[str, list[Segment]] = {}
    for seg in manifesto() + apollo() + references():
        groups.setdefault(seg.video_id, []).append(seg)
    return groups


# Pictures from the shared media with what a classifier would name in them: "visual" segments.
PICTURES = [("images/skimage_chelsea.png", "tabby cat, tiger cat"), ("images/skimage_horse.png", "sorrel horse"),
            ("images/skimage_coffee.png", "espresso, coffee mug"), ("images/skimage_rocket.jpg", "space shuttle, missile")]


def picture_vector(rel: str, crop: float = 1.0, side: int = 16) -> list[float]:
    """A small real image descriptor (a centred grey thumbnail), standing in for a frame feature vector."""
    from PIL import Image

    with Image.open(media(rel)) as img:
        img = img.convert("L")
        w, h = img.size
        cw, ch = int(w * crop), int(h * crop)
        img = img.crop(((w - cw) // 2, (h - ch) // 2, (w + cw) // 2, (h + ch) // 2)).resize((side, side))
        vec = [float(p) / 255.0 - 0.5 for p in img.getdata()]
    return vec


def pictures() -> list[Segment]:
    return [Segment(video_id(rel), str(media(rel)), 0.0, 1.0, "visual", label, None,
                    thumbnail=f"{video_id(rel)}/000000000.jpg", vectors={"frame": picture_vector(rel)})
            for rel, label in PICTURES]
