"""A moment of a media file as a file of its own: what a reader keeps or shares of a search hit.

Re-encoded, not copied: a stream copy starts at the keyframe before `start` (seconds early, or a frozen picture), and
a moment is short enough to encode at once. Video becomes H.264 + AAC in MP4 (plays in every browser and player);
sound alone becomes AAC in M4A.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import ffmpeg

from mediaindex.errors import MediaError
from mediaindex.media.ffmpeg_bin import ffmpeg_exe

MAX_CLIP_S = 600.0  # ten minutes: a moment, not a copy of the file
CLIP_TIMEOUT_S = 600.0
DECODE_FROM_START_S = 60.0  # a start this early is reached by decoding from the file's start
PREROLL_S = 10.0  # later ones: jump this far before it, then decode to it


def check_span(start: float, end: float, duration: float | None = None) -> tuple[float, float]:
    """The span to cut, `end` held to the file's duration; ValueError says what is wrong with it."""
    for name, t in (("start", start), ("end", end)):
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            raise ValueError(f"the clip's {name} must be a time in seconds (>= 0), got {t!r}")
    if duration is not None:
        if start >= duration:
            raise ValueError(f"the clip starts at {start:g} s, after the file ends ({duration:g} s)")
        end = min(end, duration)
    if end <= start:
        raise ValueError(f"the clip ends ({end:g} s) before it starts ({start:g} s)")
    if end - start > MAX_CLIP_S:
        raise ValueError(f"the clip is {end - start:g} s long; at most {MAX_CLIP_S:g} s are cut")
    return float(start), float(end)


# The names a clip may be written under: its data is MP4 (H.264 + AAC), or M4A for sound alone, whatever the name.
CLIP_SUFFIXES = {True: (".mp4", ".m4v", ".mov"), False: (".m4a", ".mp4", ".m4b")}


def clip_suffix(has_video: bool) -> str:
    return CLIP_SUFFIXES[has_video][0]


def clip_name(source: str | Path, start: float, end: float, has_video: bool) -> str:
    """`talk_1m02.5s-1m10.0s.mp4`: the file's name and the span, safe in any file system."""
    def at(t: float) -> str:
        minutes, seconds = divmod(t, 60)
        return f"{int(minutes)}m{seconds:04.1f}s"

    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(source).stem)[:80] or "clip"
    return f"{stem}_{at(start)}-{at(end)}{clip_suffix(has_video)}"


def read_from(source: str | Path, start: float) -> tuple[Any, dict[str, float]]:
    """ffmpeg's input of `source` for output from `start` seconds, and the output's `ss` that reaches it."""
    # Jumping (the container's keyframe index) lands on a frame that decodes to garbage where the index names
    # frames that are no real keyframes (seen: a 4:4:4 H.264 file whose only clean picture is its first): decode
    # from the file's start while that is cheap, else from a jump well before `start`.
    jump = 0.0 if start <= DECODE_FROM_START_S else start - PREROLL_S
    # Absolute paths: a relative name could read as an option ("-x.mp4") or a protocol ("concat:…") to ffmpeg.
    stream = ffmpeg.input(str(Path(source).absolute()), **({"ss": jump} if jump else {}), nostdin=None,
                          hide_banner=None, loglevel="error")
    return stream, ({"ss": start - jump} if start > jump else {})


def picked(stream: Any, has_video: bool, audio_stream: int | None) -> list[Any]:
    """What an output takes of ffmpeg's input: the streams ffmpeg would choose, or with `audio_stream` (0 for the
    file's first audio stream) the picture and that sound (a dub, a commentary)."""
    if audio_stream is None:
        return [stream]
    return [stream["v:0"], stream[f"a:{audio_stream}"]] if has_video else [stream[f"a:{audio_stream}"]]


def cut(source: str | Path, start: float, end: float, out: Path, has_video: bool,
        audio_stream: int | None = None) -> Path:
    """Write `source` from `start` to `end` seconds to `out` (MP4 with video, else M4A), with the sound of
    `audio_stream` where given; MediaError if ffmpeg fails."""
    start, end = check_span(start, end)
    stream, skip = read_from(source, start)
    span = {**skip, "t": end - start}
    streams = picked(stream, has_video, audio_stream)
    if has_video:
        stream = ffmpeg.output(*streams, str(out.absolute()), **span, vcodec="libx264", preset="veryfast", crf=23, pix_fmt="yuv420p",
                               vf="scale=trunc(iw/2)*2:trunc(ih/2)*2",  # H.264 in 4:2:0 wants even sides
                               acodec="aac", movflags="+faststart", sn=None, dn=None, f="mp4")
    else:
        stream = ffmpeg.output(*streams, str(out.absolute()), **span, vn=None, sn=None, dn=None, acodec="aac", f="ipod")
    try:
        done = subprocess.run(stream.overwrite_output().compile(cmd=ffmpeg_exe()), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=CLIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        out.unlink(missing_ok=True)
        raise MediaError(str(source), f"cutting the clip took over {CLIP_TIMEOUT_S:g} s") from None
    if done.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        out.unlink(missing_ok=True)
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise MediaError(str(source), f"ffmpeg could not cut the clip: {said[-1] if said else 'no output'}")
    return out
