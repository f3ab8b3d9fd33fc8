"""Who speaks when: Resemblyzer d-vectors over the speech regions, clustered into speakers.

The voice encoder (Resemblyzer's `pretrained.pt`, inside its PyPI wheel) embeds windows of 1.6 s
every ~0.8 s of speech while the audio streams past (`SpeakerTrack.add`), so a long file never has to
be held: only its window embeddings are kept (256 numbers each, a few MB per hour of speech).
At the end the windows are clustered (agglomerative, average linkage on cosine distance; the number of
speakers is found by a distance threshold unless given), labels are smoothed over neighbouring windows
and numbered by first appearance (S1 speaks first), and the turns label every speech segment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mediaindex.errors import ConfigError
from mediaindex.models.cache import cached

SAMPLE_RATE = 16_000
WINDOWS_PER_SECOND = 1.3  # Resemblyzer's partial utterances are 1.6 s long; ~0.77 s apart
MAX_CLUSTERED = 2000  # windows clustered directly; a longer file's others join the nearest speaker
MAX_SPEAKERS = 20
WINDOW_DISTANCE = 0.4  # cosine distance at which single windows are first split apart
# A speaker holds at least MIN_SPEAKER_SECONDS of speech and either this share of it or 30 s; smaller
# clusters are noise or a cough, and their windows join the nearest real speaker.
MIN_SHARE = 0.05
MIN_SPEAKER_SECONDS = 2.0
SMOOTH = 2  # a window takes the majority label of itself and this many neighbours each side


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


def check_speakers(n: int | None) -> int | None:
    """A given number of speakers must be a whole number from 1 to MAX_SPEAKERS (None: estimate it)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= MAX_SPEAKERS:
        raise ConfigError(f"the number of speakers must be a whole number from 1 to {MAX_SPEAKERS}, got {n!r}")
    return int(n)


class SpeakerEncoder:
    """Resemblyzer's voice encoder (its weights, run in numpy: `voice_encoder`), loaded once per process
    (`shared_speaker_encoder`).

    It runs on the CPU whatever the speech model's device: a window is a few small matrix products, and
    torch (seconds to import, for this alone) is not needed."""

    def __init__(self, device: str = "cpu", threads: int = 1) -> None:
        if device not in ("cpu", "auto"):
            raise ConfigError(f"the voice encoder runs on the CPU, not {device!r}")
        from mediaindex.models.voice_encoder import VoiceEncoderNet

        self.threads = threads or min(2, os.cpu_count() or 1)
        self.net = VoiceEncoderNet.load()
        self._warm_up()

    def _warm_up(self) -> None:
        """Pay the first call's cost now, with the load: the clustering's import, and the first forward pass;
        time that would otherwise fall on the first file's transcript."""
        import scipy.cluster.hierarchy  # noqa: F401

        noise = np.random.default_rng(0).normal(0, 0.1, 2 * SAMPLE_RATE).astype(np.float32)
        self.windows(noise)

    def windows(self, speech: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """Embeddings of windows over continuous speech, with each window's centre (seconds into `speech`)."""
        from mediaindex.models.voice_encoder import raise_volume, window_slices

        wav = np.asarray(speech, dtype=np.float32)
        if len(wav) < SAMPLE_RATE // 4 or not np.any(wav):
            return np.zeros((0, 256), np.float32), []
        wav = raise_volume(wav).astype(np.float32)
        # Resemblyzer's `embed_utterance`, with the mel spectrogram computed here (`mel_spectrogram`): its
        # own imports librosa's feature module, and with it scipy.signal and numba, seconds per process.
        slices, mel_slices = window_slices(len(wav), WINDOWS_PER_SECOND, 0.5)
        if slices[-1].stop >= len(wav):
            wav = np.pad(wav, (0, slices[-1].stop - len(wav)), "constant")
        mel = mel_spectrogram(wav)
        partials = self.net.embed(np.array([mel[s] for s in mel_slices]), self.threads)
        centres = [min(len(wav), (s.start + s.stop) / 2) / SAMPLE_RATE for s in slices]
        return partials, centres


def shared_speaker_encoder(threads: int = 1) -> SpeakerEncoder:
    """The process's voice encoder for `threads` threads, loaded (and warmed up) by its first caller."""
    return cached(("speaker-encoder", threads), lambda: SpeakerEncoder("cpu", threads=threads))


# Resemblyzer's mel spectrogram: 25 ms windows every 10 ms, 40 mel bands (its hparams), power 2, not log.
_N_FFT, _HOP, _N_MELS = 400, 160, 40


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    mels = f / (200.0 / 3)
    log = f >= 1000.0
    return np.where(log, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mels)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


def _mel_filters(sr: int = SAMPLE_RATE, n_fft: int = _N_FFT, n_mels: int = _N_MELS) -> np.ndarray:
    """Triangular Slaney-normalised mel filters (n_mels, n_fft // 2 + 1), as librosa.filters.mel builds them."""
    fft_freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2.0)), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, len(fft_freqs)), dtype=np.float32)
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


_FILTERS = _mel_filters()
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_N_FFT) / _N_FFT)).astype(np.float32)  # periodic Hann


def mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    """(frames, 40) mel power spectrogram of 16 kHz audio: centred frames (zero-padded by half a window each
    side), the same values as `librosa.feature.melspectrogram` with Resemblyzer's settings."""
    y = np.pad(np.asarray(wav, dtype=np.float32), _N_FFT // 2)
    n = 1 + (len(y) - _N_FFT) // _HOP
    frames = np.lib.stride_tricks.as_strided(y, (n, _N_FFT), (y.strides[0] * _HOP, y.strides[0]))
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)) ** 2
    return (power.astype(np.float32) @ _FILTERS.T).astype(np.float32)


@dataclass
class SpeakerTrack:
    """Window embeddings of one file, gathered part by part as the audio streams through.

    Within a part the speech regions are joined (silences cut out, as Resemblyzer's own preprocessing
    does), so a short region is heard in the voice around it rather than padded with silence.
    """

    encoder: SpeakerEncoder
    vectors: list[np.ndarray] = field(default_factory=list)
    centres: list[float] = field(default_factory=list)  # seconds into the file
    region_spans: list[tuple[float, float]] = field(default_factory=list)

    def add(self, part: np.ndarray, offset: float, regions: Sequence[tuple[int, int]]) -> None:
        """One part of the audio (starting `offset` seconds into the file) and its speech regions (samples)."""
        regions = [(a, b) for a, b in regions if b > a]
        if not regions:
            return
        vecs, centres = self.encoder.windows(np.concatenate([part[a:b] for a, b in regions]))
        starts = np.cumsum([0] + [b - a for a, b in regions])
        for vec, centre in zip(vecs, centres, strict=True):
            at = centre * SAMPLE_RATE
            i = min(int(np.searchsorted(starts, at, side="right")) - 1, len(regions) - 1)
            self.vectors.append(vec)
            self.centres.append(offset + (regions[i][0] + at - starts[i]) / SAMPLE_RATE)
        self.region_spans.extend((offset + a / SAMPLE_RATE, offset + b / SAMPLE_RATE) for a, b in regions)

    def turns(self, speakers: int | None = None, threshold: float = 0.25) -> list[Turn]:
        """Speaker turns over the speech regions, S1 first to speak."""
        speakers = check_speakers(speakers)
        if not self.centres:  # too little speech for a voice print: one speaker
            return [Turn(round(a, 3), round(b, 3), "S1") for a, b in _joined(self.region_spans)]
        speech = sum(b - a for a, b in self.region_spans)
        labels = cluster(np.stack(self.vectors), speakers, threshold, speech / len(self.centres))
        return _turns(smooth(labels), self.centres, self.region_spans)


def cluster(x: np.ndarray, speakers: int | None, threshold: float, window_seconds: float = 0.77) -> np.ndarray:
    """A speaker index for each window embedding (rows of `x`, L2-normalised).

    Given no count, windows are first over-split (average linkage, cosine distance WINDOW_DISTANCE: one
    1.6 s window is a noisy voice print), then clusters whose mean voices are closer than `threshold`
    (cosine distance) are merged, most similar first: averaged over seconds of speech, one person's
    voice varies much less than one window does.
    """
    n = len(x)
    if n < 2 or speakers == 1:
        return np.zeros(n, dtype=int)
    # A very long file: cluster evenly spread windows (bounded memory and time), assign the rest after.
    sample = x if n <= MAX_CLUSTERED else x[np.linspace(0, n - 1, MAX_CLUSTERED).astype(int)]
    k = min(speakers, len(sample)) if speakers else None
    found = agglomerate(sample, k, WINDOW_DISTANCE)
    if k is None:
        found = _merge_close(sample, found, threshold)
        share = np.bincount(found) / len(sample)
        seconds = share * n * window_seconds
        keep = [i for i in range(len(share))
                if seconds[i] >= MIN_SPEAKER_SECONDS and (share[i] >= MIN_SHARE or seconds[i] >= 30.0)]
        centroids = _centroids(sample, found)[keep or [int(np.argmax(share))]]
    else:
        centroids = _centroids(sample, found)
    return np.argmax(x @ centroids.T, axis=1)


def agglomerate(x: np.ndarray, k: int | None, distance: float) -> np.ndarray:
    """Average-linkage agglomerative clusters of the rows of `x` on cosine distance, labelled 0, 1, …: cut
    into `k` clusters, or (k None) merged while the clusters are closer than `distance`. SciPy's hierarchy
    (scikit-learn's AgglomerativeClustering gives the same clusters, but importing scikit-learn costs seconds,
    with pandas and scipy.stats, in every process that diarizes)."""
    from scipy.cluster.hierarchy import cut_tree, fcluster, linkage

    tree = linkage(np.asarray(x, dtype=np.float64), method="average", metric="cosine")
    if k is not None:
        raw = cut_tree(tree, n_clusters=k).reshape(-1)
    else:
        # Merges at distance < `distance` (the last merge below it; fcluster keeps merges at <= t).
        below = tree[:, 2][tree[:, 2] < distance]
        raw = fcluster(tree, t=float(below.max()), criterion="distance") if len(below) else np.arange(len(x))
    _, labels = np.unique(np.asarray(raw), return_inverse=True)
    return labels.astype(int)


def _merge_close(x: np.ndarray, labels: np.ndarray, threshold: float) -> np.ndarray:
    """Join the two clusters with the most similar mean voice while they are closer than `threshold`."""
    labels = labels.copy()
    while labels.max() > 0:
        c = _centroids(x, labels)
        sim = c @ c.T
        np.fill_diagonal(sim, -1.0)
        i, j = np.unravel_index(int(np.argmax(sim)), sim.shape)
        if 1.0 - sim[i, j] >= threshold:
            break
        a, b = min(i, j), max(i, j)
        labels[labels == b] = a
        labels[labels > b] -= 1
    return labels


def _centroids(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    out = np.stack([x[labels == i].mean(axis=0) for i in range(labels.max() + 1)])
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def smooth(labels: np.ndarray) -> np.ndarray:
    """Majority label over each window's neighbours: one odd window is no turn."""
    out = labels.copy()
    for i in range(len(labels)):
        counts = np.bincount(labels[max(0, i - SMOOTH) : i + SMOOTH + 1])
        if counts.max() > counts[labels[i]]:
            out[i] = int(np.argmax(counts))
    return out


# Turns follow the speech: two stretches of one speaker are one turn only where they touch (within the
# 10 ms a VAD frame is), not across a pause. A pause inside a turn would say someone speaks in silence: a
# false alarm wherever a speaker pauses.
TOUCH = 0.01


def _joined(spans: Sequence[tuple[float, float]], gap: float = TOUCH) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _turns(labels: np.ndarray, centres: Sequence[float], region_spans: Sequence[tuple[float, float]]) -> list[Turn]:
    """Speech regions split among the windows centred in them (at the midpoints between centres); a region
    without a window centre goes to the nearest window; same-speaker stretches that touch joined, pauses
    left out. S1 speaks first."""
    order = np.argsort(centres, kind="stable")
    times, labels = np.asarray(centres)[order], np.asarray(labels)[order]
    names: dict[int, str] = {}
    for label in labels:
        names.setdefault(int(label), f"S{len(names) + 1}")
    pieces: list[tuple[float, float, str]] = []
    for lo, hi in sorted(region_spans):
        inside = np.nonzero((times >= lo) & (times <= hi))[0]
        if not len(inside):
            nearest = int(np.argmin(np.abs(times - (lo + hi) / 2)))
            pieces.append((lo, hi, names[int(labels[nearest])]))
            continue
        edges = [lo] + [(times[i] + times[j]) / 2 for i, j in zip(inside, inside[1:], strict=False)] + [hi]
        pieces += [(float(edges[k]), float(edges[k + 1]), names[int(labels[i])]) for k, i in enumerate(inside)]
    out: list[Turn] = []
    for a, b, name in pieces:
        if out and out[-1].speaker == name and a - out[-1].end <= TOUCH:
            out[-1] = Turn(out[-1].start, round(b, 3), name)
        else:
            out.append(Turn(round(a, 3), round(b, 3), name))
    return out


def speaker_at(turns: Sequence[Turn], start: float, end: float) -> str | None:
    """The speaker of most of [start, end] (the nearest turn's when none overlaps)."""
    if not turns:
        return None
    overlap: dict[str, float] = {}
    for t in turns:
        o = min(end, t.end) - max(start, t.start)
        if o > 0:
            overlap[t.speaker] = overlap.get(t.speaker, 0.0) + o
    if overlap:
        return max(overlap, key=lambda s: overlap[s])
    middle = (start + end) / 2
    return min(turns, key=lambda t: min(abs(middle - t.start), abs(middle - t.end))).speaker
