"""Decode media, streamed: 16 kHz mono audio in chunks (ffmpeg), video frames in one pass (PyAV).

Nothing here holds a whole file in memory: audio arrives in fixed-size chunks from ffmpeg's pipe,
and each video frame is looked at once (for shot detection and, when it may be sampled, kept small).
"""

from __future__ import annotations

import collections
import functools
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import ffmpeg
import numpy as np

from mediaindex.errors import MediaError, MediaTimeoutError
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.media.probe import MediaInfo, is_cover_art
from mediaindex.media.sampling import Sampled, SpanSampler, spread
from mediaindex.media.shots import ShotDetector, detector_picture, shots_from_cuts

if TYPE_CHECKING:
    import av

SAMPLE_RATE = 16_000


def _last_error_line(stderr: bytes | str) -> str:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "ffmpeg failed"


def _timeout_reason(what: str, timeout: float) -> str:
    return f"{what} took longer than {timeout:g} s (ingest.file_timeout) and was stopped"


class AudioStream:
    """One audio stream (`track`, counted among the file's audio streams from 0) as 16 kHz mono float32 chunks
    of `chunk_seconds`, read from ffmpeg.

    With `channels=2` the stream is mixed to stereo instead (a mono source gives two equal channels)
    and each chunk is a (samples, 2) array; `sample_rate` may be lowered for a quick look at the sound.
    A watchdog kills ffmpeg at the deadline, so a decode that hangs is stopped, not waited on.
    After iterating, `decoded_seconds` and `warning` (set when a readable prefix ended in an error)
    say what was read.
    """

    def __init__(self, path: str | Path, chunk_seconds: float = 300.0, timeout: float | None = None,
                 channels: int = 1, sample_rate: int = SAMPLE_RATE, track: int = 0) -> None:
        if channels not in (1, 2):
            raise ValueError(f"audio is decoded as mono or stereo, not {channels} channels")
        self.path = str(path)
        self.channels = channels
        self.track = track
        self.sample_rate = sample_rate
        self.chunk_samples = max(1, int(chunk_seconds * sample_rate))
        self.timeout = timeout
        self.decoded_seconds = 0.0
        self.warning: str | None = None

    def _command(self) -> list[str]:
        # The one audio stream, as raw 32-bit float PCM (mono, or interleaved stereo) on stdout. Raw PCM has no
        # timestamps: a stream that starts after the file does (audio muxed in late, a capture's first packets)
        # is padded with silence from the file's start (aresample async=1 pads or trims the start alone), so
        # that a sample's place is its time in the file.
        stream = ffmpeg.input(self.path, nostdin=None, hide_banner=None, loglevel="error").output(
            "pipe:1", map=f"0:a:{self.track}", vn=None, sn=None, dn=None, f="f32le", acodec="pcm_f32le", ac=self.channels,
            ar=self.sample_rate, af="aresample=async=1:first_pts=0")
        return stream.compile(cmd=ffmpeg_exe())

    def __iter__(self) -> Iterator[np.ndarray]:
        proc = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        stderr_tail: collections.deque[bytes] = collections.deque(maxlen=20)
        stderr = proc.stderr
        assert stderr is not None  # opened with stderr=PIPE
        drain = threading.Thread(target=lambda: stderr_tail.extend(iter(stderr.readline, b"")), daemon=True)
        drain.start()
        # The limit counts time spent waiting for ffmpeg, not time the consumer spends on a chunk
        # (transcribing a long file may rightly take longer than decoding it).
        waited = 0.0
        reading_since: list[float | None] = [None]
        timed_out = threading.Event()
        finished = threading.Event()

        def watch() -> None:
            while not finished.wait(min(0.2, (self.timeout or 1) / 4)):
                since = reading_since[0]
                if since is not None and waited + time.monotonic() - since > (self.timeout or 0):
                    timed_out.set()
                    proc.kill()
                    return

        watchdog = threading.Thread(target=watch, daemon=True) if self.timeout else None
        if watchdog:
            watchdog.start()
        total = 0
        try:
            assert proc.stdout is not None
            frame = 4 * self.channels
            want = self.chunk_samples * frame
            while True:
                reading_since[0] = started = time.monotonic()
                buf = proc.stdout.read(want)
                waited += time.monotonic() - started
                reading_since[0] = None
                usable = len(buf) // frame * frame
                if usable and not timed_out.is_set():
                    chunk = np.frombuffer(buf[:usable], dtype=np.float32).copy()
                    if self.channels > 1:
                        chunk = chunk.reshape(-1, self.channels)
                    total += len(chunk)
                    self.decoded_seconds = total / self.sample_rate
                    yield chunk
                if len(buf) < want:
                    break
            proc.wait()
            drain.join(timeout=5)
        finally:
            finished.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if timed_out.is_set():
            raise MediaTimeoutError(self.path, _timeout_reason("audio decoding", self.timeout or 0))
        if proc.returncode != 0:
            reason = _last_error_line(b"".join(stderr_tail))
            if total == 0:
                raise MediaError(self.path, f"audio cannot be decoded: {reason}")
            self.warning = f"audio ends early at {total / self.sample_rate:.1f} s: {reason}"


def decode_audio(path: str | Path, timeout: float | None = None) -> np.ndarray:
    """The whole first audio stream at once (short clips, tests and benchmarks)."""
    chunks = list(AudioStream(path, chunk_seconds=60.0, timeout=timeout))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


# Two channels carry different sound (one speaker each, say) when their waveforms hardly correlate and
# in a good share of the sounding moments one channel is much louder than the other. On the sample
# media a file with a speaker per channel, talking over each other, hardly correlates and is mostly
# one-sided; stereo music correlates more and is rarely one-sided; speech in both channels correlates
# almost fully. The two thresholds below sit between them.
SEPARATE_BELOW_CORRELATION = 0.5
SEPARATE_ONE_SIDED_SHARE = 0.2
_LOOK_RATE = 8_000  # the look at the channels needs no more than speech's band
_LOOK_FRAME = _LOOK_RATE // 20  # 50 ms
_SOUNDING_DB = -50.0  # a moment sounds when its louder channel is above this (dBFS)
_ONE_SIDED_DB = 10.0  # ... and is one-sided when the other channel is this much quieter


@dataclass(frozen=True)
class ChannelLook:
    """How the two channels of a file's first audio stream relate (`channel_look`)."""

    correlation: float  # of the two waveforms over the whole stream (1: the same sound)
    one_sided: float  # share of the sounding 50 ms moments in which one channel is 10 dB louder
    sounding: int  # sounding moments seen

    @property
    def separate(self) -> bool:
        """Each channel carries its own sound: a mono mix would lay one over the other."""
        return (self.sounding > 0 and self.correlation < SEPARATE_BELOW_CORRELATION
                and self.one_sided >= SEPARATE_ONE_SIDED_SHARE)


def cover_picture(path: str | Path) -> np.ndarray | None:
    """A file's cover picture (`MediaInfo.cover_art`) as RGB; None where it has none or it cannot be decoded."""
    import av

    try:
        with av.open(str(path), metadata_errors="ignore", timeout=60.0) as container:
            for stream in container.streams.video:
                if is_cover_art(stream):
                    for frame in container.decode(stream):
                        return frame.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, ValueError):
        pass
    return None


def channel_look(path: str | Path, timeout: float | None = None, track: int = 0) -> ChannelLook:
    """One quick pass over an audio stream as 8 kHz stereo: do its channels carry the same sound?"""
    lr = ll = rr = 0.0
    sounding = one_sided = 0
    rest = np.zeros((0, 2), dtype=np.float32)
    for chunk in AudioStream(path, chunk_seconds=60.0, timeout=timeout, channels=2, sample_rate=_LOOK_RATE,
                             track=track):
        x = chunk.astype(np.float64)
        lr += float(x[:, 0] @ x[:, 1])
        ll += float(x[:, 0] @ x[:, 0])
        rr += float(x[:, 1] @ x[:, 1])
        frames = np.concatenate([rest, chunk])
        n = len(frames) // _LOOK_FRAME * _LOOK_FRAME
        rest = frames[n:]
        if n:
            energy = (frames[:n].astype(np.float64) ** 2).reshape(-1, _LOOK_FRAME, 2).mean(axis=1)
            db = 10 * np.log10(energy + 1e-12)
            loud = db.max(axis=1) > _SOUNDING_DB
            sounding += int(loud.sum())
            one_sided += int((loud & (np.abs(db[:, 0] - db[:, 1]) > _ONE_SIDED_DB)).sum())
    correlation = lr / np.sqrt(ll * rr) if ll > 0 and rr > 0 else 0.0
    return ChannelLook(round(float(correlation), 4), round(one_sided / sounding, 4) if sounding else 0.0, sounding)


@dataclass(frozen=True)
class Frame:
    time: float  # presentation time in seconds
    image: np.ndarray  # H x W x 3 uint8 RGB, as displayed (aspect-corrected and rotated)


@dataclass
class Part:
    """A span of the video (a shot, or an `interval`-long piece of a long shot) and frames from
    inside it, spread evenly over the span.

    The frame nearest the middle is the part's picture, kept whole (thumbnail, OCR, image search);
    the others only feed the image classifier and are kept as the central square that classifiers
    look at, at `sample_side` pixels, which takes about half the memory of a whole picture.
    """

    start: float
    end: float
    frames: list[Frame]  # presentation order, at least one
    picture: int = 0  # index of the whole picture in `frames`

    @property
    def keyframe(self) -> Frame:
        return self.frames[self.picture]


@dataclass
class VideoScan:
    """What one decoding pass over the video found."""

    parts: list[Part] = field(default_factory=list)  # tile [first frame, end)
    shots: list[tuple[float, float]] = field(default_factory=list)
    frames: int = 0
    end: float = 0.0  # presentation time where the decoded video ends
    variable_frame_rate: bool = False
    warning: str | None = None

    @property
    def keyframes(self) -> list[Frame]:
        return [p.keyframe for p in self.parts]

    @property
    def spans(self) -> list[tuple[float, float]]:
        return [(p.start, p.end) for p in self.parts]

    @property
    def images(self) -> int:
        return sum(len(p.frames) for p in self.parts)


def _keyframe_size(info: MediaInfo, max_side: int) -> tuple[int, int]:
    """Output size before rotation: the coded size stretched by the pixel aspect, fitted in max_side."""
    w, h = info.width or 2, info.height or 2
    num, den = (int(x) for x in info.sample_aspect_ratio.split(":"))
    sar = Fraction(num, den) if num > 0 and den > 0 else Fraction(1)
    dw, dh = (float(w * sar), float(h)) if sar >= 1 else (float(w), float(h / sar))
    scale = min(1.0, max_side / max(dw, dh))
    return max(2, round(dw * scale)), max(2, round(dh * scale))


def _display_image(frame: av.VideoFrame, size: tuple[int, int], rotation: int) -> np.ndarray:
    """RGB at the display size, turned upright; scaled before converting, so only the small picture is."""
    img: np.ndarray = frame.reformat(width=size[0], height=size[1], interpolation="AREA").to_ndarray(format="rgb24")
    if rotation:
        img = np.ascontiguousarray(np.rot90(img, k={90: -1, 180: 2, 270: 1}.get(rotation, 0)))
    return img


def _center_square(rgb: np.ndarray, side: int) -> np.ndarray:
    """The central square of a picture, scaled so it is `side` pixels (never enlarged)."""
    h, w = rgb.shape[:2]
    scale = min(1.0, side / min(h, w))
    if scale < 1.0:
        rgb = cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
    h, w = rgb.shape[:2]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    return np.ascontiguousarray(rgb[top : top + s, left : left + s])


def _make_part(start: float, end: float, chosen: list[Sampled[np.ndarray]], sample_side: int) -> Part:
    middle = (start + end) / 2
    picture = min(range(len(chosen)), key=lambda i: abs(chosen[i].time - middle))
    frames = [Frame(round(c.time, 3), c.value if i == picture else _center_square(c.value, sample_side))
              for i, c in enumerate(chosen)]
    return Part(round(start, 3), round(end, 3), frames, picture)


def _close_part(parts: list[Part], sampler: SpanSampler[av.VideoFrame | np.ndarray], end: float, max_parts: int,
                sample_side: int, picture: Callable[[av.VideoFrame | np.ndarray], np.ndarray]) -> None:
    start = sampler.start
    chosen = [Sampled(c.time, picture(c.value)) for c in sampler.close(end)]
    if chosen:
        parts.append(_make_part(start, end, chosen, sample_side))
    if len(parts) > max_parts:
        _merge_shortest(parts, sampler.count, sample_side)


def _merge_shortest(parts: list[Part], samples: int, sample_side: int) -> None:
    """Merge the part standing for the shortest time into the one before, keeping `samples` frames
    spread over the joined span (the earlier part's picture stays its picture, the later one's
    becomes a square), so the list stays under its cap."""
    if len(parts) < 2:
        return
    j = 1 + int(np.argmin([p.end - p.start for p in parts[1:]]))
    before, part = parts[j - 1], parts[j]
    picture = before.keyframe
    later = [f if i != part.picture else Frame(f.time, _center_square(f.image, sample_side))
             for i, f in enumerate(part.frames)]
    others = [Sampled(f.time, f) for f in before.frames + later if f is not picture]
    kept = [c.value for c in spread(others, before.start, part.end, samples - 1)] if samples > 1 else []
    before.frames = sorted([picture, *kept], key=lambda f: f.time)
    before.picture = before.frames.index(picture)
    before.end = part.end
    del parts[j]


def scan_video(
    path: str | Path,
    info: MediaInfo,
    interval: float,
    max_side: int,
    max_keyframes: int = 600,
    shot_threshold: float = 27.0,
    min_shot_len: float = 0.6,
    deadline: float | None = None,
    timeout: float | None = None,
    on_frame: Callable[[float], None] | None = None,
    samples: int = 5,
    sample_side: int = 256,
    threads: int = 0,
) -> VideoScan:
    """Decode the first video stream once: detect shots and keep frames from inside each part.

    Parts are the shots, with long shots cut every `interval` seconds; each part keeps `samples`
    frames spread evenly over it (not its first frame, which is often a transition): the middle one
    whole, at most `max_side` pixels, the others as `sample_side` squares (see `Part`). Memory is
    bounded by `max_keyframes` parts: the interval is widened for long files so interval parts use
    at most half of the cap, and past the cap the part standing for the shortest time is merged
    into the one before.
    """
    import av

    scan = VideoScan()
    samples = max(1, samples)
    if info.duration > 0:
        interval = max(interval, info.duration * 2 / max_keyframes)
    size = _keyframe_size(info, max_side)
    # Candidates stay decoded frames and only the few chosen per part are converted, at display size; past
    # 1080p they are converted at once, so the candidates (at most 4 × samples, at least 12) never hold much memory.
    sampler: SpanSampler[av.VideoFrame | np.ndarray] = SpanSampler(samples)
    hold_frames = (info.width or 0) * (info.height or 0) <= 1920 * 1088

    def picture(candidate: av.VideoFrame | np.ndarray) -> np.ndarray:
        return candidate if isinstance(candidate, np.ndarray) else _display_image(candidate, size, info.rotation)

    def keep(frame: av.VideoFrame) -> av.VideoFrame | np.ndarray:
        return frame if hold_frames else picture(frame)

    gaps: list[float] = []
    prev_t: float | None = None
    try:
        with av.open(str(path), metadata_errors="ignore", timeout=60.0) as container:
            stream = next(v for v in container.streams.video if (v.codec_context.width or 0) > 0)
            stream.thread_type = "AUTO"
            if threads:
                stream.thread_count = threads
            rate = stream.average_rate or stream.guessed_rate or Fraction(25)
            # Times are the file's, as a player counts them and the audio is read: from the container's start, not
            # the video stream's own (a picture muxed in after the sound starts that much later).
            start_pts = (int(Fraction(container.start_time, 1_000_000) / stream.time_base)
                         if container.start_time is not None and stream.time_base else stream.start_time or 0)
            detector = ShotDetector(stream.codec_context.width, Fraction(rate.numerator, rate.denominator),
                                    threshold=shot_threshold, min_shot_len=min_shot_len)
            for frame in container.decode(stream):
                if deadline is not None and time.monotonic() > deadline:
                    raise MediaTimeoutError(str(path), _timeout_reason("video decoding", timeout or 0))
                if frame.pts is None:
                    continue
                pts = max(0, frame.pts - start_pts)
                assert frame.time_base is not None  # frames decoded from a stream carry its time base
                t = float(pts * frame.time_base)
                if prev_t is not None and t <= prev_t:
                    continue  # a repeated or out-of-order timestamp carries no new picture
                if prev_t is not None:
                    gaps.append(t - prev_t)
                prev_t = t
                # Every frame is converted only as small as the detector needs (candidates for the
                # pictures kept are converted by the sampler, at their own size).
                small = detector_picture(frame, detector.size(frame.width, frame.height))
                cut = bool(detector.feed(pts, Fraction(frame.time_base.numerator, frame.time_base.denominator), small))
                scan.frames += 1
                if scan.frames == 1:
                    sampler.start = t
                elif cut or t - sampler.start >= interval - 1e-6:
                    _close_part(scan.parts, sampler, t, max_keyframes, sample_side, picture)
                sampler.offer(t, functools.partial(keep, frame))
                if on_frame:
                    on_frame(t)
            detector.finish()
    except MediaError:
        raise
    except (av.error.FFmpegError, StopIteration, ValueError, MemoryError) as exc:
        if scan.frames == 0:
            raise MediaError(str(path), f"video cannot be decoded: {_av_reason(exc)}") from exc
        scan.warning = f"video ends early at {prev_t or 0:.1f} s: {_av_reason(exc)}"
    if scan.frames == 0:
        return scan
    last_gap = float(np.median(gaps)) if gaps else 0.0
    scan.end = round(max(prev_t or 0.0, 0.0) + last_gap, 3)
    if info.duration > 0 and scan.warning is None and scan.end > info.duration - 1.0:
        scan.end = max(scan.end, round(info.duration, 3))
    elif info.duration > 0 and scan.end < info.duration - 1.0 and scan.warning is None:
        scan.warning = f"video ends early at {scan.end:.1f} s of {info.duration:.1f} s"
    _close_part(scan.parts, sampler, scan.end, max_keyframes, sample_side, picture)
    scan.variable_frame_rate = bool(gaps) and (max(gaps) - min(gaps)) > 0.5 * float(np.median(gaps))
    scan.shots = [(s.start, s.end) for s in shots_from_cuts(detector.cuts, scan.end)]
    return scan


def _av_reason(exc: BaseException) -> str:
    if isinstance(exc, StopIteration):
        return "no video stream with a picture size"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
