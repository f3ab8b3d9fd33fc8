"""How long reading a feature film's subtitle file takes, by format.

manifesto.srt's captions repeated into `--cues` cues, 4.5 s apart (1,500: a two-hour film), written beside a copy of
manifesto.mp4 as SubRip, TTML and SCC (by ttconv), SAMI and LRC; each read with `read_subtitles` `--repeat` times
(wall and CPU seconds, the fastest run).

    python benchmarks/subtitle_formats.py [--cues 1500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from mediaindex.media.subtitles import read_subtitles

SHARED = Path(__file__).resolve().parents[2] / "shared" / "media"


def _stamp(seconds: float) -> str:
    whole, millis = divmod(round(seconds * 1000), 1000)
    return f"{whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d},{millis:03d}"


def _write_formats(folder: Path, count: int) -> list[Path]:
    from ttconv.imsc import writer as ttml_writer
    from ttconv.scc import writer as scc_writer
    from ttconv.srt import reader as srt_reader

    blocks = (SHARED / "groundtruth" / "manifesto.srt").read_text(encoding="utf-8").strip().split("\n\n")
    texts = [" ".join(block.splitlines()[2:])[:32] for block in blocks]  # one caption line fits 32 columns
    cues = [(1.0 + 4.5 * i, texts[i % len(texts)]) for i in range(count)]
    srt = "".join(f"{i + 1}\n{_stamp(start)} --> {_stamp(start + 3)}\n{text}\n\n" for i, (start, text) in enumerate(cues))
    written = {"film.srt": srt}
    document = srt_reader.to_model(io.StringIO(srt))
    written["film.scc"] = scc_writer.from_model(document)
    written["film.ttml"] = ElementTree.tostring(ttml_writer.from_model(document).getroot(), encoding="unicode")
    written["film.smi"] = ("<SAMI><BODY>\n" + "".join(f"<SYNC Start={round(s * 1000)}><P>{t}\n"
                                                        f"<SYNC Start={round(s * 1000) + 3000}><P>&nbsp;\n"
                                                        for s, t in cues) + "</BODY></SAMI>\n")
    written["film.lrc"] = "".join(f"[{int(s // 60):02d}:{s % 60:05.2f}]{t}\n" for s, t in cues)
    paths = []
    for name, text in written.items():
        (folder / name).write_text(text, encoding="utf-8")
        paths.append(folder / name)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cues", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "all").mkdir()
        for file in _write_formats(root / "all", args.cues):
            alone = root / file.suffix.lstrip(".")
            alone.mkdir()
            shutil.copy(SHARED / "video" / "manifesto.mp4", alone / "film.mp4")
            shutil.copy(file, alone / file.name)
            best = (float("inf"), float("inf"))
            for _ in range(args.repeat):
                wall, cpu = time.perf_counter(), time.process_time()
                found = read_subtitles(alone / "film.mp4")
                best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
            (track,) = found.tracks
            print(f"{file.suffix:6} {file.stat().st_size / 1e3:8.1f} kB  {len(track.cues):5d} cues  "
                  f"wall {best[0]:.2f} s  cpu {best[1]:.2f} s")


if __name__ == "__main__":
    main()
