"""The labelled query sets of the search benchmarks, read into one shape, and what a right moment is.

Two sets: "media" (../shared/media with benchmarks/search_queries*.yaml) and "media-val"
(../shared/media-val with its own queries.yaml and offarchive.yaml, written apart from this project's
search code). Each query: text, the file names that answer it, the labelled time range, its kind, whether
it is off-archive (no right answer) and, for off-archive ones, whether it is a near miss of something shown.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
SETS = {"media": SHARED / "media", "media-val": SHARED / "media-val"}
# The media set's still pictures are searched as the shots of short clips (the archive indexes video and
# audio): more real photographs among the shots the relevance model is fitted on.
PICTURE_SECONDS = 3


def picture_clips(media: Path, out: Path) -> list[Path]:
    """Each picture of `media/images` as a PICTURE_SECONDS clip `out/<name>.mp4` (made once)."""
    import ffmpeg

    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    out.mkdir(parents=True, exist_ok=True)
    clips = []
    for picture in sorted((media / "images").iterdir()):
        clip = out / f"{picture.stem}.mp4"
        if not clip.exists():
            looped = {} if picture.suffix == ".gif" else {"loop": 1}
            partial = clip.with_suffix(".partial.mp4")  # a clip cut short by a kill is never taken as made
            (ffmpeg.input(str(picture), t=PICTURE_SECONDS, **looped)
             .filter("scale", "trunc(iw/2)*2", "trunc(ih/2)*2")
             .output(str(partial), r=10, pix_fmt="yuv420p", loglevel="error")
             .overwrite_output().run(cmd=ffmpeg_exe()))
            partial.replace(clip)
        clips.append(clip)
    return clips


@dataclass(frozen=True)
class Labelled:
    query: str
    files: tuple[str, ...]
    start: float
    end: float
    kind: str
    near_miss: bool = False

    @property
    def off_archive(self) -> bool:
        return not self.files

    @property
    def group(self) -> str:
        """What cross-validation folds by: the answering file, or the query itself when none answers."""
        return self.files[0] if self.files else f"off:{self.query}"

    def family(self) -> str:
        """visual, multilingual (German, Korean, translations), paraphrase or other."""
        k = self.kind
        if "visual" in k or k == "ocr":
            return "visual" if "visual" in k else "ocr"
        if any(t in k for t in ("german", "korean", "multilingual", "_de", "_ko")):
            return "multilingual"
        if "paraphrase" in k:
            return "paraphrase"
        return "other"


def _media_queries() -> list[Labelled]:
    out: list[Labelled] = []
    for path in sorted(HERE.glob("search_queries*.yaml")):
        nearmiss_file = "nearmiss" in path.name
        for q in yaml.safe_load(path.read_text(encoding="utf-8")):
            files = tuple(q.get("files") or ())
            out.append(Labelled(q["query"], files, float(q["start"]), float(q["end"]), q["kind"],
                                near_miss=nearmiss_file and not files))
    return out


def _val_queries(root: Path) -> list[Labelled]:
    out = [Labelled(q["q"], (Path(q["file"]).name,), float(q["window"][0]), float(q["window"][1]), q["kind"])
           for q in yaml.safe_load((root / "queries.yaml").read_text(encoding="utf-8"))]
    for line in (root / "offarchive.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith("- "):
            continue
        text = yaml.safe_load(line)[0]  # the comment goes
        out.append(Labelled(text, (), 0.0, 0.0, "off_archive", near_miss=bool(re.search(r"#\s*near miss", line))))
    return out


# What made-up strings are made of: syllables of consonants and vowels, runs along a keyboard's rows, letters
# mixed with digits, Hangul syllables.
_CONSONANTS, _VOWELS = "bcdfghjklmnprstvwxz", "aeiouy"
_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_HANGUL = (0xAC00, 0xD7A3)


def made_up(n: int, seed: int = 0) -> list[Labelled]:
    """`n` strings with no meaning, made at random (seeded) in four ways in turn, as off-archive queries: more
    of what people type by mistake or to try the search than a hand-written list holds, for fitting only."""
    rng = random.Random(seed)

    def pseudo_word() -> str:
        return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) + rng.choice(("", "", rng.choice(_CONSONANTS)))
                       for _ in range(rng.randint(1, 3)))

    def key_run() -> str:
        row = rng.choice(_KEYBOARD_ROWS)
        start = rng.randrange(len(row) - 2)
        return row[start:start + rng.randint(3, len(row) - start)]

    def mixed() -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(2, 5)))

    def hangul() -> str:
        return "".join(chr(rng.randint(*_HANGUL)) for _ in range(rng.randint(1, 3)))

    makers = (pseudo_word, key_run, mixed, hangul)
    return [Labelled(" ".join(makers[i % len(makers)]() for _ in range(rng.randint(1, 3))), (), 0.0, 0.0,
                     "off_archive_made_up") for i in range(n)]


def load_set(name: str) -> list[Labelled]:
    return _media_queries() if name == "media" else _val_queries(SETS[name])


def relevant(hit, q: Labelled) -> bool:
    return Path(hit.source).name in q.files and hit.start < q.end and hit.end > q.start


def rank_of(hits, q: Labelled) -> int | None:
    return next((i + 1 for i, h in enumerate(hits) if relevant(h, q)), None)
