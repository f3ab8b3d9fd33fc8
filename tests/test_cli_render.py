"""How moments read in a terminal: a table where there is room, a heading line per moment where there is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex.cli import render

SAID = ("and then you let it go, you swing it, thereby converting gravitational potential energy into kinetic "
        "energy, and that was the whole idea of the demonstration")
MOMENTS = [
    {"source": "/media/pendulum_lecture.webm", "start": 54.5, "end": 65.1, "modality": "speech", "text": SAID,
     "speaker": "S1", "score": 0.23, "band": "low", "thumbnail": None},
    {"source": "/media/[bold]odd name.mp4", "start": 0.0, "end": 37.7, "modality": "visual", "text": "",
     "looks_like": ["limousine", "golf cart"], "score": 0.91, "band": "high", "thumbnail": None},
]


def shown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, width: int, moments: list[dict] = MOMENTS,
          on_disk: bool = True) -> str:
    """The moments as printed, their files (named as in `moments`) in `tmp_path`, or gone from it."""
    tmp_path.mkdir(exist_ok=True)
    placed = [{**m, "source": str(tmp_path / Path(m["source"]).name)} for m in moments]
    for m in placed:
        if on_disk:
            Path(m["source"]).write_bytes(b"")
    with open(tmp_path / "out.txt", "w") as sink:
        console = render.console(width=width, record=True, color_system=None, file=sink)
        monkeypatch.setattr(render, "out", console)
        render.hits(placed, False, tmp_path)
    return console.export_text()


def shown_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, width: int, said: str) -> str:
    return shown(monkeypatch, tmp_path, width, [{**MOMENTS[0], "text": said}])


def test_a_narrow_terminal_lists_each_moment_under_a_heading_line(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    lines = shown(monkeypatch, tmp_path, 80).splitlines()
    assert lines[0] == "low 0.23  pendulum_lecture.webm  0:54.5–1:05.1  speech"
    body = [ln for ln in lines[1:] if ln.startswith("    ")]
    assert body[0].startswith("    S1: and then you let it go") and all(len(ln) <= 80 for ln in lines)
    assert all(ln == ln.rstrip() for ln in lines)  # no padding to the terminal's width
    gone = shown(monkeypatch, tmp_path / "elsewhere", 80, on_disk=False).splitlines()
    assert gone[0] == "low 0.23  pendulum_lecture.webm (gone from disk)  0:54.5–1:05.1  speech"
    said = " ".join(ln.strip() for ln in body[:-1])
    # Cut after a whole word, and marked as cut.
    assert said.endswith("…") and said[:-1] in "S1: " + SAID and not said.endswith(" …")
    # A file name is printed as it is, never read as markup.
    assert "high 0.91  [bold]odd name.mp4  0:00.0–0:37.7  visual" in lines
    assert lines[-1] == "    (picture without words; looks like limousine, golf cart)"
    assert "    S1: [Music] la la" in shown_with(monkeypatch, tmp_path, 80, "[Music] la la").splitlines()
    assert "    S1: reply with :x: or :thumbs_up:" in shown_with(  # words, never emoji codes
        monkeypatch, tmp_path, 80, "reply with :x: or :thumbs_up:").splitlines()


def test_a_wide_terminal_gets_a_table_with_one_line_per_short_field(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    text = shown(monkeypatch, tmp_path, 160)
    assert "┃ match" in text and "┃ text" in text
    row = next(ln for ln in text.splitlines() if "pendulum_lecture.webm" in ln)
    assert "low 0.23" in row and "0:54.5–1:05.1" in row and "speech" in row and "S1: and then" in row
    assert "[bold]odd name.mp4" in text  # never read as markup
    assert "[Music]" in shown_with(monkeypatch, tmp_path, 160, "[Music] la la")


def test_clip_words_cuts_after_a_whole_word() -> None:
    assert render.clip_words("short text", 120) == "short text"
    assert render.clip_words("one two three four", 12) == "one two…"
    assert render.clip_words("x" * 30, 10) == "x" * 10 + "…"
    assert render.clip_words("砸自己的脚" * 4, 8) == "砸自己的脚砸自己…"


def test_errors_and_job_tables_show_bracketed_names_as_written(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from mediaindex.jobs import Job, JobFile

    with open(tmp_path / "out.txt", "w") as sink, open(tmp_path / "err.txt", "w") as err_sink:
        console = render.console(width=160, record=True, color_system=None, file=sink)
        errors = render.console(width=160, record=True, color_system=None, file=err_sink)
        monkeypatch.setattr(render, "out", console)
        monkeypatch.setattr(render, "err", errors)
        render.fail("/tmp/[bold]clip.mp4: image file not found")
        render.fail("/tmp/take :x: 10:30.mp4: image file not found")
        job = Job("j1", "ingest", "done", {}, None, None, 0.0, 0.0)
        render.job_files(job, {"failed": 1}, [JobFile("/media/[red]take 2.mp4", "failed", "no audio [dim]", 1, None, {})],
                         False)
    said = errors.export_text()
    assert "error: /tmp/[bold]clip.mp4: image file not found" in said
    assert "error: /tmp/take :x: 10:30.mp4: image file not found" in said  # a name, never emoji codes
    table = console.export_text()
    assert "/media/[red]take 2.mp4" in table and "no audio [dim]" in table


@pytest.mark.parametrize(("score", "reads"), [(0.148, "0.14"), (0.15, "0.15"), (0.29, "0.29"), (0.7, "0.70"),
                                              (0.699999, "0.69"), (1.0, "1.00"), (0.0, "0.00")])
def test_a_probability_is_cut_to_two_places_never_rounded_up_to_a_line(score: float, reads: str) -> None:
    assert render.probability(score) == reads


def test_the_closest_moment_just_under_the_low_line_does_not_read_as_on_it(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    closest = [{**MOMENTS[0], "source": str(tmp_path / "pendulum_lecture.webm"), "score": 0.148, "band": None}]
    with open(tmp_path / "out.txt", "w") as sink:
        console = render.console(width=80, record=True, color_system=None, file=sink)
        monkeypatch.setattr(render, "out", console)
        render.hits([], False, tmp_path, closest)
    lines = console.export_text().splitlines()
    assert lines[0] == "no confident match; the closest moments (not confident matches):"
    assert lines[1].startswith("closest 0.14  pendulum_lecture.webm")
