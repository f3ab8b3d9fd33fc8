"""The web page in a real headless Chromium (Debian's package, driven by Playwright) against a real
uvicorn server on loopback, at a desktop size (1400×900) and a phone size (390×844).

Every test writes a full-page screenshot to test-artifacts/web/ (ignored by git) to look at.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from mediaindex.api import create_app
from mediaindex.api.keys import KeyStore
from tests.conftest import REPO, frame_at, make_settings, media
from tests.test_api_support import LiveServer, Sample, sample  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SHOTS = REPO / "test-artifacts" / "web"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium started for tests only: no outbound connections, no sandbox (root), sound allowed without a gesture.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-gpu", "--mute-audio", "--autoplay-policy=no-user-gesture-required",
                 "--disable-features=Translate,MediaRouter,OptimizationHints"]
VIEWPORTS = {"desktop": {"width": 1400, "height": 900}, "phone": {"width": 390, "height": 844}}
T = TypeVar("T")
PLAYER = ("document.querySelector('#player-area video:not([hidden]), #player-area audio:not([hidden])')")


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (`make browser` installs it with fonts-noto-cjk)")
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


class Page:
    """A Playwright page that records script errors and failed requests (a 404 favicon counts)."""

    def __init__(self, context, size: str) -> None:
        self.context, self.size = context, size
        self.p = context.new_page()
        self.p.set_default_timeout(60_000)  # a busy 2-core machine
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.p.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.p.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.size}.png"
        self.p.screenshot(path=str(path), full_page=True)
        return path

    def fits(self) -> None:
        """Nothing scrolls sideways: the document is no wider than the viewport."""
        width, inner = self.p.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width <= inner, f"{width} px of content in a {inner} px viewport"

    def taps(self, selector: str) -> None:
        """Every visible control matched is at least 40 px tall and wide enough to hit."""
        small = self.p.evaluate("""(sel) => [...document.querySelectorAll(sel)]
            .filter(e => e.offsetParent !== null)
            .map(e => [e.id || e.className || e.tagName, e.getBoundingClientRect()])
            .filter(([, r]) => r.height < 40 || r.width < 24).map(([n, r]) => `${n} ${r.width}x${r.height}`)""",
                              selector)
        assert not small, small


@pytest.fixture(params=list(VIEWPORTS))
def page(request: pytest.FixtureRequest, browser, server: LiveServer) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORTS[request.param])
    page = Page(context, request.param)
    yield page
    context.close()
    assert not page.errors, page.errors


def beside_the_browser(run: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """An async call (an MCP client's) made in a thread of its own: Playwright's loop holds this one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(anyio.run, run).result()


# Armed before a click: records where the player is when its next seek completes.
ARM_SEEK = """() => {
  window.__seek = null;
  const ps = [document.getElementById('player'), document.getElementById('audio-player')];
  for (const p of ps) p.addEventListener('seeked', () => { window.__seek = {t: p.currentTime, src: p.currentSrc,
                                                                          tag: p.tagName}; }, {once: true});
}"""


def click_and_seek(page: Page, locator) -> dict:
    page.p.evaluate(ARM_SEEK)
    locator.click()
    return page.p.wait_for_function("() => window.__seek").json_value()


def test_start_page_shows_the_library(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    page.p.goto(server.url + "/")
    files = page.p.locator("#library .file")
    files.first.wait_for()
    assert files.count() == 2
    size = page.p.locator("#library-size").inner_text()
    total = sample.index.store.count()
    assert size.startswith("2 files, ") and f"{total} segments" in size, size
    jfk = page.p.locator(f"#library .file[data-video='{sample.video_id('jfk.flac')}']")
    assert "jfk.flac" in jfk.inner_text() and "0:11.0 · audio · en" in jfk.inner_text()
    assert "(speech " in jfk.inner_text()
    video = page.p.locator(f"#library .file[data-video='{sample.video_id('auto-editor_example.mp4')}'] img")
    page.p.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=video.element_handle())
    examples = page.p.locator("#examples .example")
    assert examples.count() >= 2
    assert page.p.locator("#key-button").is_hidden()  # this server has no keys
    page.fits()
    page.taps("header a, header button, header select, header input, #examples a")
    page.shot("library")
    # An example query finds something: it was taken from the index.
    example = examples.first.inner_text()
    examples.first.click()
    page.p.locator("#results .hit").first.wait_for()
    assert page.p.input_value("#q") == example
    assert not page.failed, page.failed  # the favicon and every thumbnail answered


def test_results_show_band_highlights_and_play_the_moment(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    page.p.goto(server.url + "/")
    page.p.locator("#library .file").first.wait_for()
    # Answers held back a little: the page says it is searching meanwhile.
    page.p.evaluate("""() => { const real = window.fetch;
      window.fetch = (...args) => new Promise(ok => setTimeout(ok, 1500)).then(() => real(...args)); }""")
    page.p.fill("#q", "when the time reaches forty seconds I will say banana")
    page.p.press("#q", "Enter")
    page.p.locator("#notice.loading").wait_for()
    assert page.p.locator("#notice").inner_text() == "Searching…" and page.p.locator("#library-view").is_hidden()
    first = page.p.locator("#results .hit").first
    first.wait_for()
    assert "auto-editor_example.mp4" in first.locator(".title").inner_text()
    assert first.locator(".badge").inner_text() == "speech"
    marked = " ".join(first.locator(".snippet mark").all_inner_texts()).lower()
    assert "banana" in marked and "time" in marked  # matched words are highlighted
    bands = page.p.evaluate("fetch('/search?q=banana&limit=1').then(r => r.json()).then(d => d.hits[0].band)")
    if bands:  # the searcher gives a confidence band: each hit shows it
        assert first.locator(".band").inner_text() in {"strong match", "good match", "weak match"}
    # The time is a link that plays the moment; the line is said again alone at ~40 s ("Banana").
    hits = page.p.locator("#results .hit")
    late = next(hits.nth(i) for i in range(hits.count()) if float(hits.nth(i).get_attribute("data-start")) > 10)
    start, end = float(late.get_attribute("data-start")), float(late.get_attribute("data-end"))
    state = click_and_seek(page, late.locator("a.time"))
    assert state["src"].endswith(f"/media/{sample.video_id('auto-editor_example.mp4')}") and state["tag"] == "VIDEO"
    assert start <= state["t"] <= end, (state, start, end)
    assert page.p.evaluate("location.hash").startswith("#/search")  # played in place, not navigated away
    page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentTime > 0 && !{PLAYER}.paused")
    page.fits()
    page.taps("header a, header button, header select, header input, .hit a")
    if page.size == "phone":
        # The player fits the screen and keeps room for the results.
        box = page.p.locator("#player").bounding_box()
        assert box["width"] <= 390 and box["height"] <= 0.34 * 844, box
    # A long page whatever the number of hits (padding inside the player's containing block), scrolled down.
    page.p.evaluate("document.getElementById('search-view').style.paddingBottom = '3000px'; scrollTo(0, 800)")
    page.p.wait_for_function("() => scrollY >= 800")
    # Sticky offsets are measured: after scrolling the player sits right below the header (or at 0 on phones).
    header = page.p.locator("#top").bounding_box()
    area = page.p.locator("#player-area").bounding_box()
    expected = header["height"] if page.size == "desktop" else 0
    assert abs(area["y"] - expected) <= 2, (area, header)
    page.p.evaluate("document.getElementById('search-view').style.paddingBottom = ''")
    page.p.evaluate("scrollTo(0, 0)")
    page.shot("results")


def test_empty_state_suggests_what_to_change(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    jfk = sample.video_id("jfk.flac")
    page.p.goto(f"{server.url}/#/search?q=ask+what+you+can+do+for+your+country&video_id={jfk}&modality=ocr")
    page.p.locator("#empty").wait_for()
    assert page.p.locator("#results .hit").count() == 0
    assert "No confident match for “ask what you can do for your country”" in page.p.locator("#empty-title").inner_text()
    tips = page.p.locator("#suggestions").inner_text()
    assert "fewer words: ask country" in tips and "another language: the files here are in English" in tips
    assert "search every kind" in tips and "search all files" in tips
    page.fits()
    page.shot("empty")
    page.p.get_by_role("link", name="search every kind").click()
    page.p.locator("#results .hit").first.wait_for()
    assert page.p.locator("#empty").is_hidden()


def test_the_reader_chooses_how_sure_a_match_must_be(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    # Nothing confident: the page says so and offers the closest moments, each marked as such.
    page.p.goto(f"{server.url}/#/search?q=xqzv+plorth+wimble")
    page.p.locator("#empty").wait_for()
    assert page.p.locator("#empty-title").inner_text() == "No confident match for “xqzv plorth wimble”"
    page.p.locator("#results .hit.closest").first.wait_for()
    closest = page.p.locator("#results .hit")
    assert 1 <= closest.count() <= 3
    assert all(closest.nth(i).locator(".band.closest").inner_text() == "closest" for i in range(closest.count()))
    # The page says there is no confident match before it lists what comes closest.
    assert page.p.evaluate("document.getElementById('empty').compareDocumentPosition("
                           "document.getElementById('results')) & Node.DOCUMENT_POSITION_FOLLOWING")
    page.fits()
    page.shot("closest")
    # Asking for every ranked moment (the select in the header) lists them, with no empty state.
    page.p.select_option("#confidence-filter", "none")
    page.p.press("#q", "Enter")
    page.p.wait_for_function("() => location.hash.includes('min_confidence=none')")
    page.p.locator("#results .hit:not(.closest)").first.wait_for()  # the closest ones stay until the new list
    assert page.p.locator("#empty").is_hidden() and page.p.locator("#results .hit.closest").count() == 0
    assert page.p.locator("#confidence-filter").input_value() == "none"


def test_results_by_file_list_each_file_once_with_its_best_moments(page: Page, server: LiveServer,
                                                                   sample: Sample) -> None:  # noqa: F811
    page.p.goto(f"{server.url}/#/search?q=banana&min_confidence=none")
    page.p.locator("#results .hit").first.wait_for()
    page.p.select_option("#group-filter", "file")
    page.p.press("#q", "Enter")
    page.p.wait_for_function("() => location.hash.includes('by=file')")
    groups = page.p.locator("#results .file-group")
    groups.first.wait_for()
    files = page.p.evaluate("fetch('/search/files?q=banana&min_confidence=none&limit=20&per_file=3')"
                            ".then(r => r.json()).then(d => d.files)")
    assert [f["title"] for f in files] == ["auto-editor_example.mp4", "jfk.flac"]
    assert groups.count() == 2 and page.p.locator("#notice").inner_text().startswith("2 files (")
    for i, f in enumerate(files):
        group = groups.nth(i)
        assert group.locator(".file-head .title").inner_text() == f["title"]
        below = f", the best {len(f['moments'])} below" if f["count"] > len(f["moments"]) else ""
        assert group.locator(".count").inner_text() == f"{f['count']} moment{'s' if f['count'] > 1 else ''}{below}"
        starts = [float(group.locator(".hit").nth(j).get_attribute("data-start"))
                  for j in range(group.locator(".hit").count())]
        assert starts == [m["start"] for m in f["moments"]]
        assert group.locator(".hit .title").first.is_hidden()  # the file is named once, in its heading
    moment = groups.first.locator(".hit").first
    # Each moment can be saved as a file of its own, cut by the server.
    save = moment.locator("a.save")
    href = save.get_attribute("href")
    assert save.inner_text() == "save clip" and save.get_attribute("download") == ""
    assert href == (f"/media/{files[0]['video_id']}/clip?start={files[0]['moments'][0]['start']:g}"
                     f"&end={files[0]['moments'][0]['end']:g}")
    got = page.p.evaluate("(u) => fetch(u).then(r => [r.status, r.headers.get('content-type'), "
                          "r.headers.get('content-disposition')])", href)
    assert got[:2] == [200, "video/mp4"] and got[2].startswith('attachment; filename="auto-editor_example_'), got
    state = click_and_seek(page, moment.locator("a.time"))
    assert state["src"].endswith(f"/media/{sample.video_id('auto-editor_example.mp4')}")
    assert float(moment.get_attribute("data-start")) <= state["t"] <= float(moment.get_attribute("data-end"))
    page.fits()
    page.taps("header select, .file-head a, .file-group .hit a")
    page.shot("by-file")
    # A reload keeps the view; the file's name opens its page.
    page.p.reload()
    page.p.locator("#results .file-group").first.wait_for()
    assert page.p.locator("#group-filter").input_value() == "file"
    groups.first.locator(".file-head .title").click()
    page.p.wait_for_function("() => location.hash.startsWith('#/video/')")
    assert sample.video_id("auto-editor_example.mp4") in page.p.evaluate("location.hash")


def test_more_moments_lists_the_next_ones_below_those_shown(page: Page, tmp_path: Path, cache_dir: Path,
                                                            embedder) -> None:
    # More ranked moments than one list holds: the manifesto's captions and the Apollo 11 reference transcript.
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import open_index
    from tests.corpus import apollo, manifesto

    settings = make_settings(tmp_path / "index", cache_dir, api={"media_roots": [media(".")], "keys_db":
                                                                  tmp_path / "keys.db", "rate_limit_per_minute": 0})
    index = open_index(settings, embedder.dim, embedder.name, thread_safe=True)
    for segments in (manifesto(), apollo()):
        vid, source = segments[0].video_id, segments[0].source
        record = VideoRecord(vid, source, vid, 1, 1, None, "en", len(segments), {}, 0.0)
        index.replace_video(record, segments, embedder.embed_passages([s.text for s in segments]))
    try:
        with LiveServer(create_app(settings, index=index, embedder=embedder)) as live:
            _more_moments(page, live)
    finally:
        index.close()


def _more_moments(page: Page, server: LiveServer) -> None:
    page.p.goto(f"{server.url}/#/search?q=the+country&min_confidence=none")
    hits, more = page.p.locator("#results .hit"), page.p.locator("#more")
    hits.first.wait_for()
    deeper = page.p.evaluate("fetch('/search?q=the+country&min_confidence=none&limit=40')"
                             ".then(r => r.json()).then(d => d.hits.map(h => [h.video_id, h.start]))")
    assert len(deeper) > 20  # the sample archive has more than one list's worth of ranked moments

    def shown() -> list[list]:
        return page.p.evaluate("[...document.querySelectorAll('#results .hit')]"
                               ".map(h => [h.dataset.video, Number(h.dataset.start)])")

    first = shown()
    assert len(first) == 20 and more.is_visible() and more.inner_text() == "More moments"
    page.fits()
    page.taps("#more")
    page.p.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.shot("more-offered")
    place = page.p.evaluate("window.scrollY")
    more.click()
    page.p.wait_for_function("() => location.hash.includes('limit=40') && "
                             "document.querySelectorAll('#results .hit').length > 20")
    # The same moments first, then the next ones; the reader stays where they were, on the first new one.
    assert shown() == first + [list(d) for d in deeper[20:]][: len(shown()) - 20]
    assert len(shown()) == len(deeper)
    assert more.is_visible() == (len(deeper) == 40)
    assert page.p.evaluate("window.scrollY") == pytest.approx(place, abs=2)
    assert page.p.evaluate("document.activeElement.closest('.hit') === "
                           "document.querySelectorAll('#results .hit')[20]")
    assert page.p.locator("#notice").inner_text().startswith(f"{len(deeper)} moments (")
    page.shot("more")
    # A reload lists as many; a new search starts again from the first ones.
    page.p.reload()
    page.p.wait_for_function("() => document.querySelectorAll('#results .hit').length > 20")
    page.p.fill("#q", "banana")
    page.p.press("#q", "Enter")
    # The longer list stays until the new search empties it: wait for the new one.
    page.p.wait_for_function("() => location.hash.includes('q=banana') && !location.hash.includes('limit=') && "
                             "document.querySelectorAll('#results .hit').length > 0 && "
                             "document.querySelectorAll('#results .hit').length <= 20")


def test_a_bad_id_clears_the_previous_file(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    page.p.goto(f"{server.url}/#/video/{sample.video_id('auto-editor_example.mp4')}")
    page.p.locator("#transcript .line").first.wait_for()
    page.p.wait_for_function(f"() => {PLAYER} && !{PLAYER}.paused && {PLAYER}.currentTime > 0")
    page.p.evaluate("location.hash = '#/video/nosuchfile0000'")
    page.p.locator("#notice.error").wait_for()
    assert "no video with id 'nosuchfile0000'" in page.p.locator("#notice").inner_text()
    assert page.p.locator("#notice").get_attribute("role") == "alert"
    assert page.p.locator("#video-view").is_hidden() and page.p.locator("#player-area").is_hidden()
    assert page.p.locator("#video-title").inner_text() == "" and page.p.locator("#transcript li").count() == 0
    assert page.p.locator("#export-srt").get_attribute("href") is None
    players = "[...document.querySelectorAll('video, audio')]"
    # Paused, with no source and nothing loading (NETWORK_EMPTY).
    assert page.p.evaluate(f"{players}.every(p => p.paused && !p.getAttribute('src') && p.networkState === 0)")
    page.fits()
    page.shot("error")
    # A search the server refuses (a query over 1000 characters) clears the results it replaces.
    page.p.fill("#q", "banana")
    page.p.press("#q", "Enter")
    page.p.locator("#results .hit").first.wait_for()
    page.p.fill("#q", "banana " * 200)
    page.p.press("#q", "Enter")
    page.p.locator("#notice.error").wait_for()
    assert page.p.locator("#notice").inner_text().startswith("Search failed: ")
    assert page.p.locator("#results .hit").count() == 0 and page.p.locator("#notice button.retry").is_visible()
    page.failed.clear()  # the 404 and the 422 were the point


def test_an_audio_file_gets_an_audio_player_and_its_transcript(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    page.p.goto(f"{server.url}/#/video/{sample.video_id('jfk.flac')}")
    lines = page.p.locator("#transcript .line")
    lines.first.wait_for()
    assert page.p.locator("#audio-player").is_visible() and page.p.locator("#player").is_hidden()
    assert "country" in page.p.locator("#transcript").inner_text()
    assert page.p.locator("#video-meta").inner_text().startswith("0:11.0 · audio · language en · ")
    page.p.wait_for_function("() => document.getElementById('audio-player').readyState >= 1")
    target = lines.nth(lines.count() - 1)
    start, end = float(target.get_attribute("data-start")), float(target.get_attribute("data-end"))
    state = click_and_seek(page, target)
    assert state["tag"] == "AUDIO" and start <= state["t"] <= end, state
    speakers = page.p.evaluate(f"fetch('/videos/{sample.video_id('jfk.flac')}').then(r => r.json())"
                               ".then(v => v.transcript.filter(l => l.speaker).length)")
    assert page.p.locator("#transcript .speaker").count() == speakers  # shown when the server labels speakers
    page.fits()
    page.taps(".line, .exports a")
    page.shot("audio")


def test_a_picture_finds_the_shots_that_look_like_it(page: Page, server: LiveServer, sample: Sample,  # noqa: F811
                                                     tmp_path: Path) -> None:
    """Search by picture: at the desktop size a frame of the sample video, saved as a picture, finds its shot
    first; at the phone size a moment's "similar shots" searches by its frame and leaves that moment out."""
    import cv2

    page.p.goto(server.url + "/")
    page.p.locator("#library .file").first.wait_for()
    if page.size == "desktop":
        (tmp_path / "notes.png").write_text("not a picture")
        page.p.set_input_files("#picture-input", str(tmp_path / "notes.png"))
        page.p.locator("#notice.error").wait_for()
        assert page.p.locator("#notice").inner_text().startswith("Search by picture failed: ")
        assert "image" in page.p.locator("#notice").inner_text()
        page.failed.clear()  # the server's 422 for it
        # A photo as a camera makes it, far over the server's body limit: the page sends it smaller.
        frame = frame_at("video/auto-editor_example.mp4", 3.0, max_side=4000)
        still = tmp_path / "still.png"
        cv2.imwrite(str(still), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 0])
        assert still.stat().st_size > 4 * sample.settings.api.max_body_bytes
        page.p.set_input_files("#picture-input", str(still))
        first = page.p.locator("#results .hit").first
        first.wait_for()
        page.p.locator("#notice:not(.loading)").wait_for()
        assert page.p.evaluate("location.hash") == "#/picture"
        assert re.fullmatch(r"\d+ shots? like still\.png \(\d+ ms\)", page.p.locator("#notice").inner_text())
        assert first.get_attribute("data-video") == sample.video_id("auto-editor_example.mp4")
        assert first.locator(".badge").inner_text() == "picture"
    else:
        page.p.fill("#q", "when the time reaches forty seconds I will say banana")
        page.p.press("#q", "Enter")
        hit = page.p.locator("#results .hit").filter(has=page.p.locator("a.similar")).first
        hit.wait_for()
        video, start = hit.get_attribute("data-video"), float(hit.get_attribute("data-start"))
        title = hit.locator(".title").inner_text()
        hit.locator("a.similar").click()
        page.p.locator("#notice:not(.loading)").wait_for()
        assert page.p.evaluate("location.hash").startswith("#/like?")
        said = page.p.locator("#notice").inner_text()
        assert re.match(rf"(\d+ shots? like|No other shot looks like) {re.escape(title)} at ", said), said
        hits = page.p.locator("#results .hit")
        assert not any(hits.nth(i).get_attribute("data-video") == video and
                       float(hits.nth(i).get_attribute("data-start")) <= start <= float(hits.nth(i).get_attribute("data-end"))
                       for i in range(hits.count()))
    page.fits()
    page.taps("#library-head button, .hit a")
    page.shot("picture")
    assert not page.failed, page.failed


def test_a_question_is_answered_with_moments_that_play_or_stopped(page: Page, server: LiveServer,
                                                                  sample: Sample) -> None:  # noqa: F811
    """The words in the box asked as a question: the server's agent (the bundled language model) answers with
    moments that play where they were said. At the desktop size the question is stopped while it runs (before
    the model's next call), at the phone size it is answered."""
    page.p.goto(server.url + "/")
    page.p.locator("#library .file").first.wait_for()
    page.p.fill("#q", "What does Kennedy ask his fellow Americans to do?")
    page.p.click("#ask-button")
    page.p.locator("#ask-stop").wait_for()
    assert page.p.locator("#ask-question").inner_text() == "What does Kennedy ask his fellow Americans to do?"
    assert "#/ask?q=" in page.p.url
    status = "document.getElementById('ask-status').textContent"
    if page.size == "desktop":
        page.p.click("#ask-stop")
        page.p.wait_for_function(f"() => {status}.startsWith('Stopped')", timeout=180_000)
        jobs = page.p.evaluate("fetch('/jobs?kind=ask&limit=1').then(r => r.json())")
        assert (jobs[0]["state"], jobs[0]["error"]) == ("cancelled", "stopped before its next language-model call")
        assert page.p.locator("#ask-answer").inner_text() == "" and page.p.locator("#ask-stop").is_hidden()
    else:
        cited = page.p.locator("#ask-moments .cited")
        cited.first.wait_for(timeout=180_000)
        assert page.p.evaluate(status).startswith("Answered from "), page.p.evaluate(status)
        assert "country" in page.p.locator("#ask-answer").inner_text()
        assert page.p.locator("#ask-answer a.time").count() >= 1  # the citation marker became a link
        link = cited.first.locator("a.time")
        assert link.inner_text().startswith("jfk.flac ")
        state = click_and_seek(page, link)
        assert state["tag"] == "AUDIO" and 0 <= state["t"] <= 11.0, state
        page.taps("#ask-moments a")
    page.fits()
    page.shot("ask")


def test_a_file_without_a_stored_summary_is_summarised_on_request(page: Page, server: LiveServer,
                                                                  sample: Sample) -> None:  # noqa: F811
    """The sample files were indexed without summaries: the file page says so and offers one, made by the
    server's agent as a summary job; its chapters play where they start. At the phone size it is stopped."""
    page.p.goto(f"{server.url}/#/video/{sample.video_id('jfk.flac')}")
    page.p.locator("#transcript .line").first.wait_for()
    status = page.p.locator("#summary-status")
    assert status.inner_text() == "No summary was made when this file was indexed."
    page.p.click("#summarise-button")
    page.p.locator("#summarise-stop").wait_for()
    if page.size == "phone":
        page.p.click("#summarise-stop")
        page.p.wait_for_function("() => document.getElementById('summary-status').textContent.startsWith('Stopped')",
                                 timeout=180_000)
        assert page.p.locator("#summarise-button").is_visible() and page.p.locator("#chapters li").count() == 0
    else:
        chapter = page.p.locator("#chapters .chapter")
        chapter.first.wait_for(timeout=180_000)
        assert status.inner_text().startswith("Made by ") and "ingest with summaries to keep one" in status.inner_text()
        assert page.p.locator("#summary-text").inner_text().strip()
        page.p.wait_for_function("() => document.getElementById('audio-player').readyState >= 1")
        state = click_and_seek(page, chapter.first.locator("a.time"))
        assert state["tag"] == "AUDIO" and state["t"] < 11.0, state
        assert page.p.locator("#summarise-button").is_hidden()
        page.taps("#chapters a")
    page.fits()
    page.shot("summary")


def test_transcript_view_and_video_at_its_own_size(page: Page, server: LiveServer, sample: Sample) -> None:  # noqa: F811
    video = sample.video_id("auto-editor_example.mp4")
    page.p.goto(f"{server.url}/#/video/{video}")
    lines = page.p.locator("#transcript .line")
    lines.first.wait_for()
    assert page.p.locator("#video-title").inner_text() == "auto-editor_example.mp4"
    page.p.wait_for_function("() => document.getElementById('player').readyState >= 1")
    target = lines.nth(lines.count() - 1)  # the last line starts after 0: a real seek
    start, end = float(target.get_attribute("data-start")), float(target.get_attribute("data-end"))
    assert start > 0
    state = click_and_seek(page, target)
    assert state["tag"] == "VIDEO" and start <= state["t"] <= end, (state, start, end)
    assert page.p.get_attribute("#export-srt", "href") == f"/videos/{video}/transcript?format=srt"
    # The transcript rides along as captions (off until the viewer turns them on; turned on here).
    track = page.p.evaluate("() => { const p = document.getElementById('player'); p.textTracks[0].mode = 'hidden';"
                            " return p.querySelector('track').getAttribute('src'); }")
    assert track == f"/videos/{video}/transcript?format=vtt"
    page.p.wait_for_function("() => document.getElementById('player').textTracks[0].cues?.length > 0")
    first = page.p.evaluate("() => document.getElementById('player').textTracks[0].cues[0].text")
    said = re.sub(r"<[^>]+>", "", first).split()  # a cue is a voice span: "<v S1>Hello. …</v>"
    assert said and " ".join(said[:4]) in lines.first.inner_text(), first
    # 1280×720 is wider than the column: the player takes the column's width, never more than the screen.
    box = page.p.locator("#player").bounding_box()
    column = page.p.locator("main").evaluate("m => m.clientWidth")
    assert box["width"] <= column and box["height"] <= 0.56 * VIEWPORTS[page.size]["height"]
    page.fits()
    page.shot("transcript")
    # A 320×180 file plays at 320×180, not blown up to the column.
    page.p.evaluate("play('/files/video/manifesto.mp4', 1, 'manifesto.mp4', true)")
    page.p.wait_for_function("() => document.getElementById('player').videoWidth === 320")
    small = page.p.locator("#player").bounding_box()
    assert (round(small["width"]), round(small["height"])) == (320, 180), small


# A glyph the fonts do not have is drawn as the .notdef box ("tofu"); every missing glyph looks the same.
GLYPHS = """([font, chars]) => {
  const c = document.createElement('canvas'); c.width = 64; c.height = 64;
  const ctx = c.getContext('2d', {willReadFrequently: true});
  const draw = (ch) => { ctx.clearRect(0, 0, 64, 64); ctx.font = font; ctx.fillStyle = '#000';
                         ctx.fillText(ch, 4, 48); return Array.from(ctx.getImageData(0, 0, 64, 64).data).join(','); };
  return {tofu: [draw('\\u{10FFFD}'), draw('\\u{10FFF0}')], glyphs: chars.map(draw)};
}"""


def test_cjk_and_korean_text_render_as_glyphs(page: Page, server: LiveServer) -> None:
    query = "미국 국민 여러분 砸自己的脚"
    page.p.goto(f"{server.url}/#/search?q={query}")
    page.p.wait_for_function("() => document.querySelector('#results .hit') || !document.getElementById('empty').hidden")
    font = page.p.locator("#q").evaluate("e => getComputedStyle(e).font")
    chars = ["미", "국", "민", "여", "砸", "自", "己", "脚"]
    drawn = page.p.evaluate(GLYPHS, [font, chars])
    assert drawn["tofu"][0] == drawn["tofu"][1], "the check cannot tell a missing glyph from a drawn one"
    tofu = drawn["tofu"][0]
    missing = [ch for ch, pixels in zip(chars, drawn["glyphs"], strict=True) if pixels == tofu]
    assert not missing, f"drawn as boxes (no CJK font: apt-get install fonts-noto-cjk): {missing}"
    assert len(set(drawn["glyphs"])) == len(chars)  # each character its own glyph
    assert page.p.input_value("#q") == query
    # Text tagged Korean (a transcript line's or a hit's language) breaks lines at its spaces, not inside a word;
    # Chinese and Japanese, without spaces, still break between characters.
    breaks = page.p.evaluate("""() => ['ko', 'zh', 'ja', 'en'].map((lang) => {
        const p = document.createElement('p'); p.lang = lang; document.body.append(p);
        const rule = getComputedStyle(p).wordBreak; p.remove(); return rule; })""")
    assert breaks == ["keep-all", "normal", "normal", "normal"], breaks
    page.fits()
    page.shot("cjk")


def test_offline_server_is_said_and_retried(page: Page, server: LiveServer) -> None:
    page.p.goto(server.url + "/")
    page.p.locator("#library .file").first.wait_for()
    page.context.set_offline(True)
    page.p.fill("#q", "fellow Americans")
    page.p.press("#q", "Enter")
    page.p.locator("#notice.offline").wait_for()
    assert "does not answer" in page.p.locator("#notice").inner_text()
    assert page.p.locator("#notice button.retry").is_visible()
    page.shot("offline")
    page.context.set_offline(False)  # back online: the page tries again by itself
    page.p.locator("#results .hit").first.wait_for()
    assert page.p.locator("#notice.offline").count() == 0
    assert "jfk.flac" in page.p.locator("#results .hit .title").first.inner_text()


def test_library_pages(server: LiveServer, sample: Sample) -> None:  # noqa: F811
    import httpx

    whole = httpx.get(f"{server.url}/library").json()
    assert whole["files"] == 2 and [v["source"] for v in whole["videos"]] == sorted(v["source"] for v in whole["videos"])
    second = httpx.get(f"{server.url}/library", params={"offset": 1, "limit": 1}).json()
    assert second["files"] == 2 and len(second["videos"]) == 1
    assert second["videos"][0]["video_id"] == whole["videos"][1]["video_id"]
    jfk = next(v for v in whole["videos"] if v["title"] == "jfk.flac")
    assert jfk["kinds"]["speech"] == jfk["segments"] and jfk["has_video"] is False
    assert whole["duration"] == pytest.approx(sum(v["duration"] for v in whole["videos"]))
    assert whole["keys_required"] is False and whole["examples"] and whole["max_upload_bytes"] == 512 * 1024**2
    icon = httpx.get(f"{server.url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert httpx.get(f"{server.url}/library", params={"limit": 0}).status_code == 422


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
        assert page.locator("#key-button").is_visible()  # keys exist here: the key can be changed
        context.close()


def test_a_file_is_taken_out_of_the_index_from_its_page(browser, tmp_path: Path, cache_dir: Path, embedder) -> None:
    """Declined, nothing changes; confirmed, the library says so without the file (its media file stays). At the
    phone size the last file, deleted from disk first (the library and its page say so), goes and the library is
    empty."""
    from mediaindex.config import ApiSettings
    from tests.test_index_remove import build

    archive = build(tmp_path, cache_dir, embedder, ["talks/jfk.flac", "old/LJ002-0035.wav"])
    settings = archive.settings.model_copy(update={"api": ApiSettings(
        media_roots=[archive.folder], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    with LiveServer(create_app(settings, embedder=embedder)) as live:
        for size, (name, left) in zip(VIEWPORTS, [("jfk.flac", "1 file, "), ("LJ002-0035.wav", "The index is empty")],
                                      strict=True):
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            video_id = archive.ids["talks/jfk.flac" if name == "jfk.flac" else "old/LJ002-0035.wav"]
            if size == "phone":
                (archive.folder / "old/LJ002-0035.wav").unlink()
                page.p.goto(f"{live.url}/")
                item = page.p.locator(f"#library .file[data-video='{video_id}']")
                item.wait_for()
                assert item.locator(".gone").inner_text() == "gone from disk"
            page.p.goto(f"{live.url}/#/video/{video_id}")
            page.p.locator("#transcript .line").first.wait_for()
            if size == "phone":
                page.p.wait_for_function("() => document.getElementById('notice').textContent.includes('no longer')")
                assert page.p.locator("#notice").inner_text() == (
                    f"{name} is no longer where it was indexed from, so it cannot be played; Remove from index, "
                    "below, takes it out.")
                assert page.p.locator("#video-meta").inner_text().endswith(" · gone from disk")
                assert page.p.locator("#player-area").is_hidden()
                page.p.goto(f"{live.url}/#/search?q=Eight%2C%20the%20press%20yard")
                hit = page.p.locator(f"#results .hit[data-video='{video_id}']")
                hit.wait_for()
                assert hit.locator(".gone").inner_text() == "gone from disk"
                hit.locator("a.time").click()
                assert page.p.locator("#notice").inner_text() == (
                    f"{name} is no longer where it was indexed from, so it cannot be played.")
                assert page.p.locator("#player-area").is_hidden()
                page.shot("gone-hit")
                # An answer citing that moment (the hit's own, as the ask job returns it): marked, not played.
                start, end = float(hit.get_attribute("data-start")), float(hit.get_attribute("data-end"))
                page.p.evaluate("""([id, start, end]) => { show("ask-view"); showAnswer("What is eight?", {result:
                    {output: {status: "answered", model: "m", steps: 1, answer: `The press yard. [${id}@${start}-${end}]`,
                              citations: [{video_id: id, start, end, text: "Eight, the press yard"}]}}}); }""",
                                [video_id, start, end])
                cited = page.p.locator("#ask-moments .cited")
                assert cited.locator(".gone").inner_text() == "gone from disk"
                page.p.locator("#notice").evaluate("n => n.replaceChildren()")
                page.p.locator("#ask-answer a.time").click()
                assert page.p.locator("#notice").inner_text() == (
                    f"{name} is no longer where it was indexed from, so it cannot be played.")
                assert page.p.locator("#player-area").is_hidden()
                page.fits()
                page.shot("gone-cited")
                page.p.goto(f"{live.url}/#/video/{video_id}")
                page.p.locator("#transcript .line").first.wait_for()
            asked: list[str] = []
            page.p.once("dialog", lambda d, asked=asked: (asked.append(d.message), d.dismiss()))
            page.p.click("#remove-button")
            assert asked == [f"Take {name} out of the index? Its transcript, summary and thumbnails go; a file in "
                             "your folders stays where it is."]
            assert page.p.locator("#video-view").is_visible() and page.p.locator("#remove-button").is_enabled()
            page.taps("#remove-button")
            page.fits()
            page.shot("remove")

            page.p.once("dialog", lambda d: d.accept())
            page.p.click("#remove-button")
            page.p.wait_for_function("() => document.getElementById('notice').textContent.includes('taken out')")
            assert page.p.locator("#notice").inner_text() == f"{name} was taken out of the index."
            assert page.p.locator("#library-size").inner_text().startswith(left)
            assert page.p.locator(f"#library .file[data-video='{video_id}']").count() == 0
            assert page.p.locator("#player-area").is_hidden()
            page.shot("removed")
            assert not page.errors and not page.failed, (page.errors, page.failed)
            page.context.close()
    assert (archive.folder / "talks/jfk.flac").is_file()


def _the_one_file_added_is_listed_and_opens(page: Page, link, name: str, shot: str) -> None:
    """The library lists the file added, alone; its line's link opens the file's page."""
    page.p.wait_for_function("() => document.getElementById('library-size').textContent.startsWith('1 file')")
    assert page.p.locator("#library .file .title").all_inner_texts() == [name]
    page.shot(shot)
    link.click()
    page.p.locator("#transcript .line").first.wait_for()
    assert page.p.locator("#video-title").inner_text() == name


def test_media_added_from_the_library_are_uploaded_and_indexed(browser, tmp_path: Path, cache_dir: Path, embedder,
                                                               pipeline) -> None:
    """The library's Add media uploads each chosen file (a job each) and says what came of it: indexed, with a link
    to its page; not media, with the reason; a copy of a file indexed already. The library then lists what was
    indexed. From an empty index at the desktop size; the copy at the phone size."""
    from mediaindex.config import ApiSettings

    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        rate_limit_per_minute=0, keys_db=tmp_path / "keys.db", upload_dir=tmp_path / "uploads",
        max_upload_bytes=512 * 1024)})
    notes = tmp_path / "notes.mp4"
    notes.write_text("minutes of the meeting, not a video")
    copy = tmp_path / "copies" / "press yard.wav"
    copy.parent.mkdir()
    shutil.copyfile(media("audio/LJ002-0035.wav"), copy)
    with LiveServer(create_app(settings, embedder=embedder, pipeline=pipeline)) as live:
        for size in VIEWPORTS:
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            page.p.goto(f"{live.url}/")
            if size == "desktop":
                page.p.locator("#library .hint").wait_for()
                assert page.p.locator("#library .hint").inner_text().startswith(
                    "Add media or a web address above, or index a folder")
                # The picker offers media by type and by the suffixes the server takes (".ts" is no type of media
                # to every system).
                accept = page.p.locator("#add-input").get_attribute("accept").split(",")
                assert accept[:2] == ["audio/*", "video/*"] and {".ts", ".m2ts", ".vob", ".m4b", ".mkv"} <= set(accept)
                big = media("audio/jfk.flac")  # 1.1 MB: over this server's 0.5 MB
                page.p.set_input_files("#add-input", [str(media("audio/LJ002-0035.wav")), str(notes), str(big)])
                done, failed = page.p.locator("#uploads .upload.done"), page.p.locator("#uploads .upload.failed")
                done.wait_for(timeout=180_000)
                page.p.wait_for_function("() => document.querySelectorAll('#uploads .upload.failed').length === 2",
                                         timeout=180_000)
                assert done.locator(".name").inner_text() == "LJ002-0035.wav"
                assert done.locator(".state").inner_text() == "indexed: 1 segment"
                assert failed.locator(".name").all_inner_texts() == ["notes.mp4", "jfk.flac"]
                said = failed.locator(".state").all_inner_texts()
                assert said[0].startswith("not indexed: not a readable media file")
                assert said[1] == "not uploaded: 1.1 MB is more than this server takes (0.5 MB)"
                _the_one_file_added_is_listed_and_opens(page, done.locator(".state a"), "LJ002-0035.wav", "add-media")
            else:
                page.p.locator("#library .file").first.wait_for()
                page.p.set_input_files("#add-input", str(copy))
                state = page.p.locator("#uploads .upload.done .state")
                state.wait_for(timeout=180_000)
                assert state.inner_text() == "already indexed: same content as LJ002-0035.wav"
                page.taps("#add-button")
                page.fits()
                page.shot("add-media")
                assert page.p.locator("#library .file").count() == 1
            assert not page.errors and not page.failed, (page.errors, page.failed)
            page.context.close()


def test_media_added_by_web_address_are_downloaded_and_indexed(browser, tmp_path: Path, cache_dir: Path, embedder,
                                                              pipeline) -> None:
    """Add from a web address: the server downloads the address and indexes its file, the line saying so with a
    link to the file's page; a page of several recordings says how many were indexed, and why one was not.
    Desktop, then phone."""
    from mediaindex.config import ApiSettings
    from tests.test_download import serving

    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        rate_limit_per_minute=0, keys_db=tmp_path / "keys.db", fetch_urls="all")})
    with serving(tmp_path / "served") as files, \
            LiveServer(create_app(settings, embedder=embedder, pipeline=pipeline)) as live:
        for size, address in (("desktop", f"{files}/files/jfk%20speech.flac"), ("phone", f"{files}/sounds")):
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            page.p.goto(f"{live.url}/")
            page.p.locator("#library-size").wait_for()
            assert page.p.locator("#url-form").is_hidden()
            page.taps("#url-button")
            page.p.click("#url-button")
            page.taps("#url-form button")
            page.p.fill("#url-input", address)
            page.p.locator("#url-form button[type=submit]").click()
            assert page.p.locator("#url-form").is_hidden()
            line = page.p.locator("#uploads .upload").last
            assert line.locator(".name").inner_text() == address
            if size == "desktop":
                line.and_(page.p.locator(".done")).wait_for(timeout=180_000)
                assert line.locator(".state").inner_text() == "indexed: 1 segment"
                _the_one_file_added_is_listed_and_opens(page, line.locator(".state a"), "jfk speech.flac", "add-address")
                # Its page says where it came from, as a link there.
                assert page.p.locator("#video-metadata dt").all_inner_texts() == ["from"]
                source = page.p.locator("#video-metadata dd a")
                assert source.inner_text() == address and source.get_attribute("href") == address
            else:
                line.and_(page.p.locator(".done")).wait_for(timeout=180_000)  # a page of two recordings, one gone
                said = line.locator(".state").inner_text()
                # Its first is the desktop's recording again.
                assert said.startswith("1 already indexed; 1 not: the page's video could not be saved ("), said
                assert "HTTP Error 404" in said
                page.fits()
                page.shot("add-address")
            assert not page.errors and not page.failed, (page.errors, page.failed)
            page.context.close()


def test_a_files_metadata_is_on_its_page_and_its_values_keep_the_library_and_searches_to_files_with_them(
        browser, tmp_path: Path, cache_dir: Path, embedder, pipeline) -> None:
    """Two recordings indexed with a manifest's title and tags: a file's page is headed by its title (its file name
    beside), lists its tags, each a link to the library's files with it; from there a search (and at the desktop
    size a question) keeps to them, and "all files" lets go. Desktop, then phone."""
    import httpx

    from mediaindex.config import ApiSettings
    from tests.test_api_jobs import wait_for_job

    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[media("audio")], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    manifest = [{"path": str(media("audio/jfk.flac")), "metadata": {"title": "Inaugural address",
                                                                     "tags": ["speech", "politics"]}},
                {"path": str(media("audio/LJ002-0035.wav")), "metadata": {"tags": ["speech", "history"]}}]
    with LiveServer(create_app(settings, embedder=embedder, pipeline=pipeline)) as live, \
            httpx.Client(base_url=live.url, timeout=30) as client:
        job = wait_for_job(client, client.post("/ingest", json={"manifest": manifest}).json()["id"])  # type: ignore[arg-type]
        assert job["state"] == "done", job
        jfk = next(f["video_id"] for f in job["files"] if f["path"].endswith("jfk.flac"))
        for size in VIEWPORTS:
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            page.p.goto(f"{live.url}/#/video/{jfk}")
            page.p.locator("#transcript .line").first.wait_for()
            assert page.p.locator("#video-title").inner_text() == "Inaugural address"
            assert page.p.locator("#video-meta").inner_text().startswith("jfk.flac · 0:11")
            assert page.p.locator("#video-metadata dt").all_inner_texts() == ["tags"]
            page.fits()
            assert page.p.locator("#video-metadata dd a").all_inner_texts() == ["speech", "politics"]
            page.p.locator("#video-metadata a", has_text="politics").click()
            page.p.wait_for_function("() => document.getElementById('library-size').textContent.startsWith('1 file')")
            assert page.p.locator("#scope-text").inner_text() == "Only files with tags: politics"
            assert page.p.locator("#library .file .title").all_inner_texts() == ["Inaugural address"]
            page.taps("#scope-clear")
            page.fits()
            page.shot("metadata-scope")
            page.p.fill("#q", "speech")  # both files' tag, said in neither: what keeps to the scope is the filter
            page.p.press("#q", "Enter")
            page.p.wait_for_function("() => location.hash.startsWith('#/search')")
            page.p.locator("#results .hit, #empty:not([hidden])").first.wait_for()
            assert "where=tags%3Dpolitics" in page.p.url
            assert set(page.p.locator("#results .hit .title").all_inner_texts()) <= {"Inaugural address"}
            page.p.fill("#q", "the press yard")  # said in the other file alone
            page.p.press("#q", "Enter")
            # Nothing confident in scope: the tips say what was searched, and how to search everything (waited
            # for: the last search's hits stay listed until this one empties the list).
            page.p.locator("#suggestions", has_text="Only files with tags: politics were searched: search all "
                                                    "files").wait_for()
            assert "LJ002-0035.wav" not in page.p.locator("#results").inner_text()
            if size == "desktop":  # a question asked from there keeps to them too (stopped: its run is tested apart)
                page.p.fill("#q", "Who speaks?")
                with page.p.expect_request(lambda r: r.url.endswith("/ask") and r.method == "POST") as asked:
                    page.p.click("#ask-button")
                assert asked.value.post_data_json["where"] == {"tags": "politics"}
                assert "where=tags%3Dpolitics" in page.p.url and page.p.locator("#scope").is_visible()
                page.p.click("#ask-stop")
                page.p.wait_for_function("() => document.getElementById('ask-status').textContent.startsWith('Stopped')",
                                         timeout=180_000)
                page.p.go_back()
                page.p.locator("#results .hit, #empty:not([hidden])").first.wait_for()
            page.p.click("#scope-clear")
            page.p.wait_for_function("() => !location.hash.includes('where')")
            # The scoped search's closest moments stay listed until the new search empties the list: wait for the
            # file the scope kept out, not for any hit.
            page.p.locator("#results .hit .title", has_text="LJ002-0035.wav").first.wait_for()
            assert page.p.locator("#scope").is_hidden()
            assert not page.errors and not page.failed, (page.errors, page.failed)
            page.context.close()


def test_the_library_says_what_is_being_indexed_and_shows_it_once_done(browser, tmp_path: Path, cache_dir: Path,
                                                                        embedder, pipeline) -> None:
    """An ingest job the server has queued (as a watched folder or the CLI through it queues one) is said above the
    library while it waits and runs; once it ends the library is shown anew, with the file, and the line goes."""
    from mediaindex.config import ApiSettings

    root = tmp_path / "root"
    root.mkdir()
    shutil.copyfile(media("audio/jfk.flac"), root / "jfk.flac")
    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[root], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db", max_pending_jobs=1)})
    app = create_app(settings, embedder=embedder, pipeline=pipeline)
    with LiveServer(app) as live:
        state = app.state.api
        page = Page(browser.new_context(viewport=VIEWPORTS["phone"]), "phone")
        page.p.goto(f"{live.url}/")
        page.p.locator("#library .hint").wait_for()
        # Recorded as POST /ingest records it, and handed to the server's runner only once the page has said so.
        with state.jobs_lock:
            job = state.jobs.create("ingest", {"summaries": None, "reindex": False, "origin": "api"},
                                    files=[(str(root / "jfk.flac"), {})])
        line = page.p.locator("#indexing")
        line.wait_for(timeout=30_000)
        assert line.inner_text() == "Indexing: 1 job waiting to start"
        # The queue (one job here) is full: a file added now waits for room, as the server's answer asks.
        page.p.set_input_files("#add-input", str(media("audio/LJ002-0035.wav")))
        waiting = page.p.locator("#uploads .upload .state")
        page.p.wait_for_function("() => document.querySelector('#uploads .state').textContent.includes('queue')")
        assert waiting.inner_text() == "the server's queue is full; trying again in 30 s"
        assert [f for f in page.failed if "/ingest/upload" not in f] == []  # the 429 above, and nothing else
        page.failed.clear()
        page.taps("#uploads .stop")
        page.fits()
        page.shot("indexing")
        page.p.click("#uploads .stop")  # the wait ends, nothing is sent
        assert waiting.inner_text() == "not uploaded: stopped" and page.p.locator("#uploads .stop").count() == 0
        assert page.p.locator("#uploads .upload.stopped").count() == 1
        page.p.fill("#q", "fellow Amer")  # being typed as the file is finished: kept
        state.runner.submit(job.id)
        page.p.locator("#library .file").first.wait_for(timeout=30_000)
        assert page.p.locator("#library .file .title").all_inner_texts() == ["jfk.flac"]
        assert line.is_hidden() and page.p.input_value("#q") == "fellow Amer"
        assert not page.errors and not page.failed, (page.errors, page.failed)
        page.context.close()


def test_files_browsers_do_not_play_are_played_converted_from_the_moment(browser, tmp_path: Path, cache_dir: Path,
                                                                        embedder, monkeypatch) -> None:
    """An AVI (MPEG-4 Part 2 + MP3) at the desktop size and a WMA at the phone size: Chromium cannot open them,
    so the page plays the server's copy from the moment asked for, says so, and marks the transcript line of
    the file's time (the copy's time plus where it starts); another line plays from there. A video whose sound
    it plays as silence (AC-3) goes on converted after a second. A server busy with other copies is asked again;
    a file that cannot be converted either is said to be so."""
    import time

    from mediaindex.api.routes import videos
    from tests.test_playable import build_unplayable

    archive = build_unplayable(tmp_path, cache_dir, embedder)
    with LiveServer(create_app(archive.settings, embedder=embedder)) as live:
        for size, name in zip(VIEWPORTS, ["jfk.avi", "jfk.wma"], strict=True):
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            video_id = archive.ids[name]
            page.p.goto(f"{live.url}/#/video/{video_id}?t=4")
            page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentTime > 0.5")
            state = page.p.evaluate(f"""() => {{ const p = {PLAYER}; return {{tag: p.tagName, src: p.currentSrc,
                w: p.videoWidth || 0, at: fileTime(p), error: p.error && p.error.code}}; }}""")
            assert state["src"] == f"{live.url}/media/{video_id}/playable?start=4" and state["error"] is None
            assert (state["tag"], state["w"]) == (("VIDEO", 320) if name.endswith(".avi") else ("AUDIO", 0))
            assert page.p.locator("#now-playing").inner_text() == f"{name} · converted to play here"
            # The copy's controls count from 0 and know its length as far as it has arrived: the file's time and
            # whole length (JFK's 11 s) are said below them.
            said = page.p.locator("#file-time").inner_text()
            assert re.fullmatch(r"at 0:\d\d\.\d of 0:1[01]\.\d in the file \(the copy plays from 0:04\.0\)", said), said
            assert float(said.split()[1].split(":")[1]) >= 4.0
            current = page.p.locator("#transcript .line.current")
            current.wait_for()
            assert float(current.get_attribute("data-start")) <= state["at"] < float(current.get_attribute("data-end"))
            page.fits()
            page.shot("converted")
            first = page.p.locator("#transcript .line").first
            first.click()
            page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentSrc.endsWith('/playable?start=0') "
                                     f"&& {PLAYER}.currentTime > 0.3")
            assert not page.errors and not page.failed, (page.errors, page.failed)
            page.context.close()

        # Sound it cannot decode (AC-3 in Matroska) plays as silence, without an error: after a silent second
        # the page goes on from there with the converted copy.
        page = Page(browser.new_context(viewport=VIEWPORTS["phone"]), "phone")
        page.p.goto(f"{live.url}/#/video/{archive.ids['jfk.mkv']}?t=2")
        page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentSrc.includes('/playable?start=') && {PLAYER}.currentTime > 0.3")
        src, decoded = page.p.evaluate(f"() => [{PLAYER}.currentSrc, {PLAYER}.webkitAudioDecodedByteCount]")
        assert 3.0 <= float(src.rsplit("=", 1)[1]) < 6.0 and decoded > 0, src
        assert page.p.locator("#now-playing").inner_text() == "jfk.mkv · converted to play here"
        assert not page.errors and not page.failed, (page.errors, page.failed)
        page.context.close()

        page = Page(browser.new_context(viewport=VIEWPORTS["desktop"]), "desktop")
        monkeypatch.setattr(videos, "MAX_PLAYING", 0)
        page.p.goto(f"{live.url}/#/video/{archive.ids['jfk.wma']}?t=2")
        deadline = time.monotonic() + 30
        while not any(f.startswith("503 ") for f in page.failed) and time.monotonic() < deadline:
            page.p.wait_for_timeout(100)
        assert [f.split()[0] for f in page.failed] == ["503"], page.failed
        monkeypatch.setattr(videos, "MAX_PLAYING", 3)
        page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentSrc.endsWith('/playable?start=2') && {PLAYER}.currentTime > 0.3")
        assert page.p.locator("#now-playing").inner_text() == "jfk.wma · converted to play here"

        (Path(archive.settings.api.media_roots[0]) / "jfk.wma").write_bytes(bytes(range(256)) * 200)
        page.p.goto(f"{live.url}/#/video/{archive.ids['jfk.avi']}")  # another file, then the broken one afresh
        page.p.reload()
        page.p.goto(f"{live.url}/#/video/{archive.ids['jfk.wma']}?t=3")
        page.p.wait_for_function("() => document.getElementById('notice').textContent.includes('cannot be played')")
        assert page.p.locator("#notice").inner_text() == "This file cannot be played here, not even converted."
        assert not page.errors, page.errors
        page.context.close()


# Arabic written for this test (the shared recordings hold no right-to-left language): "And so, my fellow
# Americans, ask not what your country can do for you" and "ask what you can do for your country".
ARABIC = ["ولذلك يا إخوتي الأمريكيين، لا تسألوا ماذا يمكن أن يفعل وطنكم من أجلكم",
          "بل اسألوا ماذا يمكنكم أن تفعلوا من أجل وطنكم"]


def test_right_to_left_text_reads_right_to_left(browser, tmp_path: Path, cache_dir: Path, embedder) -> None:
    """A file named in Arabic whose transcript is Arabic (jfk.flac's reference lines, translated) beside
    jfk.flac: its name, hits, transcript lines and a query typed in Arabic run right to left; English stays
    left to right, at both sizes."""
    from dataclasses import replace

    from mediaindex.config import ApiSettings
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from tests.corpus import references

    folder = tmp_path / "media"
    folder.mkdir()
    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[folder], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    segs = [s for s in references() if Path(s.source).name == "jfk.flac"]
    assert len(segs) == len(ARABIC)
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        for name, video_id, texts, language in (("jfk.flac", "english", [s.text for s in segs], "en"),
                                                 ("خطاب كينيدي.flac", "arabic", ARABIC, "ar")):
            path = folder / name
            shutil.copyfile(media("audio/jfk.flac"), path)
            own = [replace(s, source=str(path), video_id=video_id, text=t, language=language, vectors={})
                   for s, t in zip(segs, texts, strict=True)]
            index.replace_video(VideoRecord(video_id, str(path), name, path.stat().st_size, 1, segs[-1].end, language,
                                            len(own), {"has_video": False}, 0.0),
                                own, embedder.embed_passages(texts))
    direction = "(e) => getComputedStyle(e).direction"
    with LiveServer(create_app(settings, embedder=embedder)) as live:
        for size in VIEWPORTS:
            page = Page(browser.new_context(viewport=VIEWPORTS[size]), size)
            page.p.goto(f"{live.url}/")
            arabic = page.p.locator("#library .file[data-video='arabic'] .title")
            arabic.wait_for()
            assert arabic.evaluate(direction) == "rtl"
            assert page.p.locator("#library .file[data-video='english'] .title").evaluate(direction) == "ltr"

            page.p.fill("#q", "وطنكم")
            assert page.p.locator("#q").evaluate(direction) == "rtl"
            page.p.press("#q", "Enter")
            hit = page.p.locator("#results .hit[data-video='arabic']").first
            hit.wait_for()
            assert hit.locator(".snippet").evaluate(direction) == "rtl"
            assert hit.locator(".title").evaluate(direction) == "rtl"
            page.fits()
            page.shot("rtl-search")

            page.p.goto(f"{live.url}/#/video/arabic")
            line = page.p.locator("#transcript .line .text").first
            line.wait_for()
            assert [t.evaluate(direction) for t in page.p.locator("#transcript .line .text").all()] == ["rtl", "rtl"]
            assert page.p.locator("#video-title").evaluate(direction) == "rtl"
            page.fits()
            page.shot("rtl-transcript")
            page.p.goto(f"{live.url}/#/video/english")
            page.p.locator("#transcript .line .text").first.wait_for()
            assert page.p.locator("#transcript .line .text").first.evaluate(direction) == "ltr"
            assert not page.errors, page.errors
            page.context.close()


def test_a_moment_heard_on_another_audio_track_is_played_on_it(browser, tmp_path: Path, cache_dir: Path,
                                                                embedder) -> None:
    """A dub (made at test time: jfk.flac as its first track, french.aiff as the default second one) whose
    English words are indexed as heard on audio 1: the hit names the track, and playing it plays that track
    (the server's copy of it, from the moment: browsers play the default track alone), and its transcript link
    opens the file's page on that track, where the default one is chosen back and plays the file itself."""
    from dataclasses import replace

    from mediaindex.config import ApiSettings
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from mediaindex.media.probe import probe
    from mediaindex.segments import TRACK_FIELD
    from tests.corpus import references
    from tests.test_mcp import call, mcp_session
    from tests.test_speech_tracks import _mux

    folder = tmp_path / "media"
    folder.mkdir()
    dub = _mux(folder / "dub.mkv", [("audio/jfk.flac", "eng", None), ("audio/french.aiff", "fra", None)], default=1,
               picture="video/cockatoo.mp4")
    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[folder], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    english = [replace(s, source=str(dub), video_id="dub", vectors={}, extra={TRACK_FIELD: "audio 1 (en)"})
               for s in references() if Path(s.source).name == "jfk.flac"]
    french = [replace(english[0], start=0.0, end=2.5, text="La dictée", language="fr", extra={})]
    info = probe(dub)
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        index.replace_video(VideoRecord("dub", str(dub), "h", dub.stat().st_size, 1, info.duration, "fr", 3,
                                        info.to_dict(), 0.0),
                            english + french, embedder.embed_passages([s.text for s in english + french]))
    with LiveServer(create_app(settings, embedder=embedder)) as live:
        page = Page(browser.new_context(viewport=VIEWPORTS["phone"]), "phone")
        page.p.goto(f"{live.url}/#/search?q=ask not what your country can do for you")
        hit = page.p.locator("#results .hit").first
        assert hit.locator(".track").inner_text() == "audio 1 (en)"
        hit.locator(".time").click()
        page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentSrc.includes('/playable?start=') "
                                 f"&& {PLAYER}.currentTime > 0.3")
        src = page.p.evaluate(f"() => {PLAYER}.currentSrc")
        assert re.fullmatch(rf"{live.url}/media/dub/playable\?start=\d+(\.\d)?&track=1", src), src
        assert page.p.locator("#now-playing").inner_text() == "dub.mkv at 0:00.0 · audio 1 (en)"
        # The captions are the words of the track heard.
        captions = page.p.evaluate(f"() => {PLAYER}.querySelector('track').getAttribute('src')")
        assert re.fullmatch(r"/videos/dub/transcript\?format=vtt(&offset=[\d.]+)?&track=1", captions), captions
        assert hit.locator("a.save").get_attribute("href") == "/media/dub/clip?start=0&end=11&track=1"
        page.shot("audio-track")
        # The moment's transcript link opens the file on that track: its lines, heard on it; the default track is
        # chosen back from the list, and its lines play the file itself.
        hit.locator("a.video-link", has_text="transcript").click()
        page.p.wait_for_function("() => document.querySelectorAll('#transcript .line').length === 2")
        assert page.p.locator("#track-choice option:checked").inner_text() == "audio 1 (en)"
        assert page.p.locator("#track-choice option").all_inner_texts() == ["audio 1 (en)", "audio 2 (fr) · default"]
        assert "country" in page.p.locator("#transcript").inner_text()
        assert page.p.get_attribute("#export-srt", "href") == "/videos/dub/transcript?format=srt&track=1"
        page.p.wait_for_function(f"() => {PLAYER}.currentSrc.endsWith('&track=1') && {PLAYER}.currentTime > 0.3")
        page.fits()
        page.shot("audio-track-file")
        page.p.select_option("#track-choice", "2")
        page.p.wait_for_function("() => document.querySelector('#transcript').textContent.includes('dictée')")
        assert "track=" not in page.p.evaluate("location.hash") and "country" not in page.p.locator("#transcript").inner_text()
        page.p.locator("#transcript .line").first.click()
        page.p.wait_for_function(f"() => {PLAYER} && {PLAYER}.currentSrc.endsWith('/media/dub')")
        assert not page.errors and not page.failed, (page.errors, page.failed)
        page.context.close()

        async def ask_mcp() -> dict:  # an assistant is told the file's tracks, the default one first
            async with mcp_session(live.url) as session:
                return await call(session, "file_info", {"file": "dub"})

        assert beside_the_browser(ask_mcp)["audio_tracks"] == ["audio 2 (fr)", "audio 1 (en)"]


def test_the_chapters_a_file_marks_are_listed_on_its_page_and_found_by_title(browser, tmp_path: Path, cache_dir: Path,
                                                                           embedder) -> None:
    """An audiobook made at test time (jfk.flac with chapter markers): its page lists the chapters it marks, each
    playing from its start, and a search for a chapter's title finds it as a "chapter marker" moment."""
    from dataclasses import replace

    from mediaindex.config import ApiSettings
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from mediaindex.media.probe import probe
    from mediaindex.segments import IN_CHAPTER_FIELD, MARKER, chapter_at
    from tests.corpus import references
    from tests.test_chapter_markers import JFK_CHAPTERS, _with_chapters
    from tests.test_mcp import call, mcp_session

    folder = tmp_path / "media"
    folder.mkdir()
    book = _with_chapters(media("audio/jfk.flac"), folder / "book.m4b", JFK_CHAPTERS, "-c:a", "aac")
    info = probe(book)
    settings = make_settings(tmp_path / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[folder], rate_limit_per_minute=0, keys_db=tmp_path / "keys.db")})
    said = [replace(s, source=str(book), video_id="book", vectors={},
                    extra={IN_CHAPTER_FIELD: chapter_at(info.chapters, s.start)})
            for s in references() if Path(s.source).name == "jfk.flac"]
    marks = [replace(said[0], start=c["start"], end=c["end"], modality=MARKER, text=c["title"], extra={})
             for c in info.chapters]
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        index.replace_video(VideoRecord("book", str(book), "h", book.stat().st_size, 1, info.duration, "en",
                                        len(said + marks), info.to_dict(), 0.0),
                            said + marks, embedder.embed_passages([s.text for s in said + marks]))
    with LiveServer(create_app(settings, embedder=embedder)) as live:
        page = Page(browser.new_context(viewport=VIEWPORTS["desktop"]), "desktop")
        page.p.goto(f"{live.url}/#/video/book")
        marked = page.p.locator("#markers .chapter")
        marked.first.wait_for()
        assert marked.all_inner_texts() == ["0:00.0\nOpening words to the nation", "0:04.0\nThe question",
                                            "0:08.0\nAsk what you can do"]
        page.shot("chapter-markers")
        seek = click_and_seek(page, marked.nth(2).locator(".time"))
        assert seek["tag"] == "AUDIO" and abs(seek["t"] - 8.0) < 0.3, seek
        page.p.goto(f"{live.url}/#/search?q=the opening words to the nation")
        hit = page.p.locator("#results .hit").first
        assert hit.locator(".badge").inner_text() == "chapter marker"
        assert hit.locator(".snippet").inner_text() == "Opening words to the nation"
        page.p.goto(f"{live.url}/#/search?q=ask what you can do for your country")
        spoken = page.p.locator("#results .hit", has=page.p.locator(".badge.speech")).first
        start, end = (float(spoken.get_attribute(f"data-{edge}") or "nan") for edge in ("start", "end"))
        # The chapter its matched words lie in, one of those it spans.
        assert spoken.locator(".in-chapter").inner_text() in {c["title"] for c in info.chapters
                                                              if c["start"] < end and c["end"] > start}
        page.fits()
        assert not page.errors and not page.failed, (page.errors, page.failed)
        page.context.close()

        async def ask_mcp() -> dict:  # an assistant is told them too
            async with mcp_session(live.url) as session:
                return await call(session, "file_info", {"file": "book"})

        info = beside_the_browser(ask_mcp)
        assert [(m["title"], m["start"]) for m in info["markers"]] == [
            ("Opening words to the nation", 0.0), ("The question", 4.0), ("Ask what you can do", 8.0)]
        assert info["audio_tracks"] == []  # one track
