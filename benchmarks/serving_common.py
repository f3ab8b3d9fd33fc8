"""Shared bits of the serving benchmarks: real prompts from the test media, timing helpers."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import torch


def media_dir() -> Path:
    env = os.environ.get("MEDIAINDEX_MEDIA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "media"


def real_prompts(n: int) -> list[list[dict[str, str]]]:
    """n chat prompts built from the manifesto captions and the reference transcripts (cycled if needed)."""
    root = media_dir()
    srt = (root / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8")
    lines = [x.strip() for x in srt.splitlines() if x.strip() and not x.strip().isdigit() and "-->" not in x]
    words = " ".join(lines).split()
    excerpts = [" ".join(words[i : i + 30]) for i in range(0, len(words) - 30, 30)]
    manifest = (root / "MANIFEST.md").read_text(encoding="utf-8").split("## audio/")[1].split("\n## ")[0]
    for row in manifest.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].endswith((".flac", ".wav")) and cells[-1].isascii():
            excerpts.append(re.sub(r"\([^)]*\)", "", cells[-1]).strip('" '))
    tasks = ["Summarize this transcript", "List the main topics of this transcript", "Rewrite this transcript formally"]
    prompts = [f"{tasks[i % len(tasks)]}: {excerpts[i % len(excerpts)]}" for i in range(n)]
    return [[{"role": "user", "content": p}] for p in prompts]


def machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {gpu}"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(torch.tensor(values, dtype=torch.float64).quantile(q))
