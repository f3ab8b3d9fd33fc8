"""The web page in a real headless Chromium (Debian's package, driven by Playwright) against a real
uvicorn server on loopback: search, play a moment, read a transcript and seek from it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediaindex.api import create_app
from mediaindex.api.keys import KeyStore
from tests.conftest import REPO
from tests.test_api_support import LiveServer, Sample, sample  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium started for tests only: no outbound connections, no sandbox (root), sound allowed without a gesture.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-gpu", "--mute-audio", "--autoplay-policy=no-user-gesture-required",
                 "--disable-features=Translate,MediaRouter,OptimizationHints"]


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; `make install` does it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(sample: Sample, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("web")
    app = create_app(sample.app_settings(tmp), index=sample.index, embedder=sample.embedder, pipeline=sample.pipeline)
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def page(browser, server: LiveServer):
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(30_000)
    yield page
    context.close()
    assert not errors, errors


# Armed before a click: records where the player is when its next seek completes.
ARM_SEEK = """() => {
  window.__seek = null;
  const p = document.getElementById('player');
  p.addEventListener('seeked', () => { window.__seek = {t: p.currentTime, src: p.currentSrc}; }, {once: true});
}"""


def click_and_seek(page, locator) -> dict:
    page.evaluate(ARM_SEEK)
    locator.click()
    return page.wait_for_function("() => window.__seek").json_value()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_search_click_plays_the_moment(page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    page.goto(server.url + "/")
    page.fill("#q", "when the time reaches forty seconds I will say banana")
    page.press("#q", "Enter")
    first = page.locator("#results .hit").first
    first.wait_for()
    assert "auto-editor_example.mp4" in first.locator(".title").inner_text()
    assert first.locator(".badge").inner_text() == "speech"
    assert first.locator(".snippet mark").count() >= 2  # matched words are highlighted
    marked = " ".join(first.locator(".snippet mark").all_inner_texts()).lower()
    assert "banana" in marked and "time" in marked
    thumb = first.locator("img")
    thumb.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle())
    # The line is said again alone at ~40 s ("Banana"): click the result that starts late in the
    # file, so the click must really seek.
    hits = page.locator("#results .hit")
    late = next(hits.nth(i) for i in range(hits.count()) if float(hits.nth(i).get_attribute("data-start")) > 10)
    start, end = float(late.get_attribute("data-start")), float(late.get_attribute("data-end"))
    state = click_and_seek(page, late)
    assert state["src"].endswith(f"/media/{sample.video_id('auto-editor_example.mp4')}")
    assert start <= state["t"] <= end, (state, start, end)
    page.wait_for_function("() => document.getElementById('player').currentTime > 0 && "
                           "!document.getElementById('player').paused")
    shot(page, "web-search.png")


def test_a_later_moment_and_the_filters(page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    jfk = sample.video_id("jfk.flac")
    page.goto(server.url + "/")
    page.locator(f"#video-filter option[value='{jfk}']").wait_for(state="attached")
    page.select_option("#video-filter", jfk)
    page.select_option("#modality-filter", "speech")
    page.fill("#q", "ask what you can do for your country")
    page.click("button[type=submit]")
    page.locator("#results .hit").first.wait_for()
    hits = page.locator("#results .hit")
    assert {hits.nth(i).get_attribute("data-video") for i in range(hits.count())} == {jfk}
    assert "video_id=" in page.evaluate("location.hash") and "modality=speech" in page.evaluate("location.hash")
    page.select_option("#modality-filter", "ocr")
    page.click("button[type=submit]")
    page.wait_for_function("() => document.getElementById('status').textContent.includes('No moments')")


def test_transcript_line_click_seeks(page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    video = sample.video_id("auto-editor_example.mp4")
    page.goto(f"{server.url}/#/video/{video}")
    lines = page.locator("#transcript .line")
    lines.first.wait_for()
    assert page.locator("#video-title").inner_text() == "auto-editor_example.mp4"
    page.wait_for_function("() => document.getElementById('player').readyState >= 1")
    target = lines.nth(lines.count() - 1)  # the last line starts after 0: a real seek
    start, end = float(target.get_attribute("data-start")), float(target.get_attribute("data-end"))
    assert start > 0
    state = click_and_seek(page, target)
    assert start <= state["t"] <= end, (state, start, end)
    href = page.get_attribute("#export-srt", "href")
    assert href == f"/videos/{video}/transcript?format=srt"
    shot(page, "web-transcript.png")


def test_the_page_asks_for_a_key_when_keys_are_required(browser, sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    keys = KeyStore(tmp_path / "keys.db")
    _, secret = keys.create("browser")
    app = create_app(sample.app_settings(tmp_path), index=sample.index, embedder=sample.embedder,
                     pipeline=sample.pipeline)
    with LiveServer(app) as live:
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{live.url}/#/search?q=fellow%20Americans")
        page.locator("#key-dialog[open]").wait_for()
        page.fill("#key-input", secret)
        page.press("#key-input", "Enter")
        page.locator("#results .hit").first.wait_for(timeout=30_000)
        assert "jfk.flac" in page.locator("#results .hit .title").first.inner_text()
        context.close()
