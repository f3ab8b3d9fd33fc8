"""A copy of a media file that a browser can play, made while it plays.

Browsers play MP4, WebM, Ogg, MP3, WAV and FLAC; archives also hold AVI, WMV, FLV, MPEG program and transport
streams, AIFF, WMA, HEVC. Those are played through this: ffmpeg re-encodes the file from a given second into
fragmented MP4 (H.264 + AAC; AAC alone for sound) written to a pipe, so that playing starts within a second or
two and costs nothing once the listener goes. Seeking elsewhere means asking again from another second.
"""

from __future__ import annotations

from pathlib import Path

import ffmpeg

from mediaindex.media.clip import picked, read_from
from mediaindex.media.ffmpeg_bin import ffmpeg_exe

MAX_SIDE = 1280  # larger pictures are scaled down to fit: encoding as fast as it plays on two cores
KEYFRAME_EVERY_S = 2  # a fragment per keyframe: the first picture shows after this much is encoded
AUDIO_FRAGMENT_US = 1_000_000  # sound alone: a fragment per second (every AAC frame is a keyframe)


def media_type(has_video: bool) -> str:
    return "video/mp4" if has_video else "audio/mp4"


def command(source: str | Path, start: float, has_video: bool, audio_stream: int | None = None) -> list[str]:
    """The ffmpeg command that writes `source` from `start` seconds to its end to stdout as fragmented MP4; with
    `audio_stream` (0 for the file's first audio stream), the sound of that stream (a dub, a commentary) in place
    of the one ffmpeg would choose."""
    stream, skip = read_from(source, start)
    streams = picked(stream, has_video, audio_stream)
    flags = "empty_moov+default_base_moof"
    if has_video:
        out = ffmpeg.output(*streams, "pipe:1", **skip, vcodec="libx264", preset="veryfast", crf=23, pix_fmt="yuv420p",
                            vf=f"scale='min(iw,{MAX_SIDE})':'min(ih,{MAX_SIDE})':force_original_aspect_ratio=decrease"
                               ":force_divisible_by=2",  # H.264 in 4:2:0 wants even sides
                            force_key_frames=f"expr:gte(t,n_forced*{KEYFRAME_EVERY_S})",
                            acodec="aac", ac=2, movflags=f"frag_keyframe+{flags}", sn=None, dn=None, f="mp4")
    else:
        out = ffmpeg.output(*streams, "pipe:1", **skip, vn=None, sn=None, dn=None, acodec="aac", ac=2, movflags=flags,
                            frag_duration=AUDIO_FRAGMENT_US, f="mp4")
    return out.compile(cmd=ffmpeg_exe())
