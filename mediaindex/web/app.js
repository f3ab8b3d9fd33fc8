// The mediaindex web page: a library to start from, search, play moments, read transcripts.
// Plain DOM, no build step; every text from the server goes in as text nodes, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const PAGE_SIZE = 24;
// A search lists this many moments (or files) at first; "more" asks again this many deeper, up to the API's most.
const RESULTS_STEP = 20;
const RESULTS_MAX = 100;
const KINDS = { speech: "speech", ocr: "on-screen text", visual: "picture", subtitle: "subtitles",
  marker: "chapter marker", chapter: "chapter", summary: "summary" };
const BANDS = { high: "strong match", medium: "good match", low: "weak match" };
let videos = [];        // every indexed file, for the file filter and the empty state's languages
let routeToken = 0;     // a view that finishes after the user moved on must not draw over the new one
let told = "";         // said once by the next library view (a file just taken out of the index)
let maxUpload = null;  // the largest file the server takes as an upload (the library says)
let refreshing = false;  // the library is about to be shown anew, not opened
let shownBefore = null;  // after "more": how many results were listed, to keep the reader's place below them
let scope = "";  // KEY=VALUE: the library and searches keep to files whose metadata has it (a tag's link)

// ---- API access --------------------------------------------------------------------------------
class Offline extends Error {}

// GET by default; a request that changes something (POST, DELETE) sends its body as JSON.
const NO_SERVER = "The server does not answer. Is `mediaindex serve` still running, and is this device online?";

async function api(path, method = "GET", body = undefined) {
  let res;
  try {
    res = await fetch(path, { method, credentials: "same-origin",
                              headers: body === undefined ? {} : { "content-type": "application/json" },
                              body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new Offline(NO_SERVER);
  }
  if (res.status === 401) {
    $("key-button").hidden = false;
    await askForKey();
    return api(path, method, body);
  }
  const answer = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) {
    throw Object.assign(new Error(answer.message || `HTTP ${res.status}`),
                        { status: res.status, retryAfter: Number(res.headers.get("retry-after")) || 0 });
  }
  return answer;
}

function askForKey() {
  // The key lives in a same-site cookie so that <video> and <img> requests carry it too.
  return new Promise((resolve) => {
    const dialog = $("key-dialog");
    $("key-input").value = "";
    $("key-cancel").onclick = () => dialog.close();
    dialog.onclose = () => {
      const key = $("key-input").value.trim();
      if (key) document.cookie = `mediaindex_key=${encodeURIComponent(key)}; path=/; SameSite=Strict`;
      resolve();
    };
    dialog.showModal();
  });
}

// ---- helpers -----------------------------------------------------------------------------------
function clock(t) {
  const s = Math.max(0, t);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = (s % 60).toFixed(1).padStart(4, "0");
  return (h ? `${h}:${String(m).padStart(2, "0")}` : `${m}`) + `:${sec}`;
}

function span(seconds) {
  const s = Math.round(seconds || 0);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60 ? `${s % 60} s` : ""}`.trim();
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const STOP = new Set(["a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "how", "i", "in",
  "is", "it", "of", "on", "or", "that", "the", "this", "to", "was", "we", "what", "when", "where", "who", "with",
  "you", "your"]);

function languageName(code) {
  try {
    return new Intl.DisplayNames([navigator.language || "en"], { type: "language" }).of(code) || code;
  } catch (e) {
    return code;  // not a language code the browser knows
  }
}

// A file as the index's list of files has it; one it does not list: its id as its name, a video, on disk.
function fileOf(videoId) {
  return videos.find((v) => v.video_id === videoId) || { title: videoId, has_video: true, on_disk: true };
}

function titleOf(videoId) { return fileOf(videoId).title; }

function hasVideoOf(videoId) { return fileOf(videoId).has_video; }

// A file no longer where it was indexed from: its moments cannot be played.
function isGone(videoId) { return fileOf(videoId).on_disk === false; }

// A probability to two places, cut rather than rounded: just under a band's line never reads as on it.
function probability(p) { return (Math.floor(Number(p) * 100 + 1e-6) / 100).toFixed(2); }

function megabytes(bytes) { return `${(bytes / 1024 ** 2).toFixed(bytes < 10 * 1024 ** 2 ? 1 : 0)} MB`; }

function plural(n, noun, many) { return `${n} ${n === 1 ? noun : (many || `${noun}s`)}`; }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "lang") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

// Text with <mark> around the spans the server matched.
function highlighted(text, spans) {
  const frag = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of spans || []) {
    if (start < at) continue;
    frag.append(text.slice(at, start), el("mark", {}, text.slice(start, end)));
    at = end;
  }
  frag.append(text.slice(at));
  return frag;
}

function notice(message, kind = "info", retry = null) {
  const box = $("notice");
  box.className = kind;
  box.setAttribute("role", kind === "error" ? "alert" : "status");
  box.replaceChildren();
  if (!message) return;
  box.append(el("span", {}, message));
  if (retry) box.append(el("button", { type: "button", class: "retry", onclick: retry }, "Try again"));
}

function failed(e, what, retry) {
  const offline = e instanceof Offline;
  notice(offline ? e.message : `${what}: ${e.message}`, offline ? "offline" : "error", retry);
}

function show(view) {
  for (const id of ["library-view", "search-view", "ask-view", "video-view"]) $(id).hidden = id !== view;
}

// ---- the player: <video> for files with pictures, <audio> for sound only -----------------------
function currentPlayer() { return $("player").hidden ? $("audio-player") : $("player"); }

// A player let go of its file: nothing keeps playing or buffering.
function release(p) {
  p.pause();
  p.removeAttribute("src");
  delete p.dataset.src;
  delete p.dataset.offset;
  delete p.dataset.track;
  p.load();
  p.hidden = true;
}

function stopPlayback() {
  for (const p of [$("player"), $("audio-player")]) release(p);
  $("player-area").hidden = true;
  $("now-playing").textContent = "";
  $("file-time").hidden = true;
}

// Files whose format the browser does not play (AVI, WMV, FLV, MPEG streams, AIFF, WMA, HEVC here, ...): their
// media URLs, once seen to fail. They play through a copy the server makes as it plays, from the moment asked for.
const converted = new Set();

// `track`: the number of the audio track to hear (a moment heard on a dub or a commentary); browsers play a
// file's default track alone, so another one plays through the converted copy.
function play(mediaUrl, start, label, hasVideo = true, track = null) {
  const player = hasVideo ? $("player") : $("audio-player");
  const other = hasVideo ? $("audio-player") : $("player");
  if (!other.hidden || other.dataset.src) release(other);
  player.hidden = false;
  $("player-area").hidden = false;
  $("now-playing").textContent = label || "";
  $("file-time").hidden = true;
  if (track || converted.has(mediaUrl)) {
    playConverted(player, mediaUrl, start, track);
  } else if (player.dataset.src === mediaUrl && player.dataset.offset === undefined && player.readyState >= 1) {
    player.currentTime = start;
    player.play().catch(() => {});  // autoplay may be refused; the position is set either way
  } else {
    const cannotPlay = (at = start) => {
      if (player.dataset.src !== mediaUrl || player.dataset.offset !== undefined) return;  // another file by now
      converted.add(mediaUrl);
      playConverted(player, mediaUrl, at);
    };
    player.dataset.src = mediaUrl;
    delete player.dataset.offset;
    delete player.dataset.track;
    setCaptions(player, mediaUrl);
    player.onerror = () => cannotPlay();  // a format it cannot open
    player.onloadedmetadata = () => {
      if (hasVideo && player.videoWidth === 0) return cannotPlay();  // opened, but no picture it can decode
      player.currentTime = start;
      player.play().catch(() => {});
      watchSound(player, mediaUrl, cannotPlay);
    };
    player.src = mediaUrl;
  }
  measureSticky();
}

// Sound the browser cannot decode (AC-3, E-AC-3, DTS here) plays as silence, with no error: once a second has
// played and no sound was decoded, the file is converted from where it is. (A count Chromium and Safari keep.)
function watchSound(player, mediaUrl, silent) {
  const id = videoIdOf(mediaUrl);
  if (!id || !fileOf(decodeURIComponent(id)).has_audio || !("webkitAudioDecodedByteCount" in player)) return;
  let played = 0;
  let last = null;
  const check = () => {
    if (player.dataset.src !== mediaUrl || player.dataset.offset !== undefined || player.webkitAudioDecodedByteCount > 0) {
      player.removeEventListener("timeupdate", check);
      return;
    }
    if (last !== null && player.currentTime > last) played += player.currentTime - last;
    last = player.currentTime;
    if (played >= 1) {
      player.removeEventListener("timeupdate", check);
      silent(player.currentTime);
    }
  };
  player.addEventListener("timeupdate", check);
}

// The converted copy starts at the moment (its time 0 is `start` in the file); another moment asks for another.
function playConverted(player, mediaUrl, start, track = null, tries = 0) {
  const from = Math.max(0, Math.floor(start * 10) / 10);
  const current = () => player.dataset.src === mediaUrl && player.dataset.offset === String(from)
                        && player.dataset.track === String(track || "");
  player.dataset.src = mediaUrl;
  player.dataset.offset = String(from);
  player.dataset.track = String(track || "");
  setCaptions(player, mediaUrl, from, track);
  if (!tries && !track) $("now-playing").textContent += " · converted to play here";  // a track: its name is said
  player.onerror = () => {
    if (!current()) return;
    // The server busy with other copies (503) or a dropped connection: asked again twice before giving up.
    if (tries < 2) setTimeout(() => current() && playConverted(player, mediaUrl, start, track, tries + 1), 2000);
    else notice("This file cannot be played here, not even converted.", "error");
  };
  player.onloadedmetadata = () => player.play().catch(() => {});
  player.src = `${mediaUrl}/playable?start=${from}${track ? `&track=${track}` : ""}`;
}

// The (URL-encoded) video id of an indexed file's media URL, "/media/ID"; undefined for another URL.
function videoIdOf(mediaUrl) {
  return (mediaUrl.match(/^\/media\/([^/?#]+)/) || [])[1];
}

// Where in the file the player is (a converted copy starts later in it).
function fileTime(player) {
  return Number(player.dataset.offset || 0) + player.currentTime;
}

// A converted copy's own controls count from the moment it starts at, and know its length only as far as it has
// arrived: the file's time and length are said below them.
for (const p of [$("player"), $("audio-player")]) {
  p.addEventListener("timeupdate", () => {
    if (p.hidden || p.dataset.offset === undefined) return;
    const id = videoIdOf(p.dataset.src || "");
    const length = id ? fileOf(decodeURIComponent(id)).duration : null;
    $("file-time").hidden = false;
    $("file-time").textContent = `at ${clock(fileTime(p))}${length ? ` of ${clock(length)}` : ""} in the file ` +
      `(the copy plays from ${clock(Number(p.dataset.offset))})`;
  });
}

// An indexed file's transcript rides along as captions (audio track `track`'s, where another one is heard): the
// player's captions button shows them.
function setCaptions(player, mediaUrl, offset = 0, track = null) {
  for (const t of player.querySelectorAll("track")) t.remove();
  const id = videoIdOf(mediaUrl);
  if (!id || player.tagName !== "VIDEO") return;
  const shift = (offset ? `&offset=${offset}` : "") + (track ? `&track=${track}` : "");
  player.append(el("track", { kind: "captions", label: "transcript", src: `/videos/${id}/transcript?format=vtt${shift}` }));
}

// The player stays in view below the header while the page scrolls: the offset is the header's
// real height (it changes with the width, fonts and wrapping), or 0 where the header scrolls away.
function measureSticky() {
  const header = $("top");
  const sticky = getComputedStyle(header).position === "sticky";
  document.documentElement.style.setProperty("--sticky-top", `${sticky ? header.getBoundingClientRect().height : 0}px`);
}
new ResizeObserver(measureSticky).observe($("top"));
window.addEventListener("resize", measureSticky);

// ---- the library (the start page) --------------------------------------------------------------
async function loadVideos() {
  try {
    videos = await api("/videos");
  } catch (e) {
    return;  // the view being shown reports the failure
  }
  const select = $("video-filter");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "" }, "all files"));
  for (const v of videos) select.append(el("option", { value: v.video_id }, v.title));
  select.value = chosen;
}

function kindsText(kinds, total) {
  const parts = Object.entries(kinds || {}).map(([k, n]) => `${KINDS[k] || k} ${n}`);
  return plural(total, "segment") + (parts.length ? ` (${parts.join(", ")})` : "");
}

function libraryItem(v) {
  const thumb = v.thumbnail_url ? el("img", { src: v.thumbnail_url, alt: "", loading: "lazy" })
                                : el("div", { class: "nothumb", "aria-hidden": "true" }, v.has_video ? "▶" : "♪");
  const meta = [v.duration ? clock(v.duration) : null, v.has_video ? "video" : "audio", v.language]
    .filter(Boolean).join(" · ");
  return el("li", { class: "file", "data-video": v.video_id },
    el("a", { href: `#/video/${encodeURIComponent(v.video_id)}` }, thumb,
      el("span", { class: "title", dir: "auto" }, v.title),
      el("span", { class: "meta" }, meta),
      el("span", { class: "meta" }, kindsText(v.kinds, v.segments)),
      v.on_disk ? null : el("span", { class: "meta gone" }, "gone from disk")));
}

async function showLibrary(page, token) {
  show("library-view");
  if (refreshing) {
    refreshing = false;  // shown anew as files were indexed: what is being typed in the box stays
  } else {
    $("q").value = "";
    notice("Loading the library…", "loading");
  }
  $("library").setAttribute("aria-busy", "true");
  let lib;
  try {
    const only = scope ? `&${new URLSearchParams({ where: scope })}` : "";
    lib = await api(`/library?offset=${page * PAGE_SIZE}&limit=${PAGE_SIZE}${only}`);
  } catch (e) {
    if (token !== routeToken) return;
    $("library").replaceChildren();
    $("library-size").textContent = "";
    $("examples").replaceChildren();
    $("pager").hidden = true;
    failed(e, "Could not load the library", route);
    return;
  } finally {
    $("library").removeAttribute("aria-busy");
  }
  if (token !== routeToken) return;
  notice(told);
  told = "";
  $("key-button").hidden = !lib.keys_required;
  maxUpload = lib.max_upload_bytes;
  $("url-button").hidden = lib.fetch_urls === "off";
  // By suffix too: a picker filters by the system's types, which miss some media (".ts" reads as TypeScript).
  $("add-input").accept = ["audio/*", "video/*", ...(lib.media_suffixes || [])].join(",");
  $("library-size").textContent = lib.files
    ? `${plural(lib.files, "file")}, ${span(lib.duration)} of media, ${plural(lib.segments, "segment")}`
    : scope ? "No file has it" : "The index is empty";
  const examples = $("examples");
  examples.replaceChildren();
  if (lib.examples.length) {
    examples.append(el("span", { class: "label" }, "Try: "));
    for (const q of lib.examples) {
      examples.append(el("a", { class: "example", href: searchHash(q) }, q));
    }
  }
  const list = $("library");
  list.replaceChildren(...lib.videos.map(libraryItem));
  if (!lib.files && !scope) {
    const added = lib.fetch_urls === "off" ? "Add media above" : "Add media or a web address above";
    list.append(el("li", { class: "hint" }, `${added}, or index a folder with `,
                   el("code", {}, "mediaindex ingest FOLDER"), ", then come back."));
  }
  followIngests(token);
  const pages = Math.max(1, Math.ceil(lib.files / PAGE_SIZE));
  $("pager").hidden = pages < 2;
  $("page-info").textContent = `page ${page + 1} of ${pages}`;
  $("prev").hidden = page === 0;
  $("next").hidden = page + 1 >= pages;
  $("prev").href = libraryHash(page);
  $("next").href = libraryHash(page + 2);
}

// ---- search ------------------------------------------------------------------------------------
// The search view, emptied while `request` runs: its answer, or null where it failed (said) or the user moved on.
async function searched(request, searching, failure, token) {
  show("search-view");
  const results = $("results");
  results.replaceChildren();
  $("more").hidden = true;
  $("empty").hidden = true;
  notice(searching, "loading");
  results.setAttribute("aria-busy", "true");
  try {
    const data = await request();
    return token === routeToken ? data : null;
  } catch (e) {
    if (token === routeToken) failed(e, failure, route);
    return null;
  } finally {
    results.removeAttribute("aria-busy");
  }
}

// How many results a search lists: the hash's `limit` (after "more"), in steps, at most the API's most.
function resultsLimit(value) {
  const n = Math.round(Number(value) / RESULTS_STEP) * RESULTS_STEP;
  return Number.isFinite(n) && n > RESULTS_STEP ? Math.min(n, RESULTS_MAX) : RESULTS_STEP;
}

async function runSearch(q, video, modality, token, confidence, by, limit = RESULTS_STEP) {
  $("q").value = q;
  $("video-filter").value = video || "";
  $("modality-filter").value = modality || "";
  $("confidence-filter").value = confidence || "";
  const byFile = by === "file";
  $("group-filter").value = byFile ? "file" : "";
  const params = new URLSearchParams({ q, limit: String(limit) });
  if (video) params.set("video_id", video);
  if (modality) params.set("modality", modality);
  if (confidence) params.set("min_confidence", confidence);
  if (scope) params.set("where", scope);
  const path = byFile ? `/search/files?${params}&per_file=3` : `/search?${params}`;
  const before = shownBefore;  // "more" was pressed: keep the reader where they were, on the first new one
  const place = before === null ? null : window.scrollY;
  shownBefore = null;
  const data = await searched(() => api(path), "Searching…", "Search failed", token);
  if (data === null) return;
  const results = $("results");
  const found = byFile ? data.files : data.hits;
  if (!found.length) {
    notice("");
    emptyState(q, video, modality, confidence !== "none");
    if (confidence !== "none") await showClosest(params, token);
    return;
  }
  notice(`${plural(found.length, byFile ? "file" : "moment")} (${Math.round(data.took_ms)} ms)`);
  for (const item of found) results.append(byFile ? fileGroup(item) : hitItem(item));
  // A full list may go on: offer the next ones (the list is asked for again, deeper: a moment's score does not
  // depend on how many are asked for, so the ones shown stay as they were).
  const more = $("more");
  more.textContent = byFile ? "More files" : "More moments";
  more.hidden = found.length < limit || limit >= RESULTS_MAX;
  if (place !== null) window.scrollTo(0, place);
  if (before !== null && results.children[before]) results.children[before].focus({ preventScroll: true });
}

$("more").addEventListener("click", () => {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  params.set("limit", String(resultsLimit(params.get("limit")) + RESULTS_STEP));
  shownBefore = $("results").children.length;
  location.hash = `#${path}?${params}`;
});

// One file that holds a match: its name (to its page), how sure its best moment is, how many of its moments
// match, and the best of them.
function fileGroup(f) {
  const shown = f.count > f.moments.length ? `, the best ${f.moments.length} below` : "";
  const head = el("div", { class: "file-head" },
    el("a", { class: "title", dir: "auto", href: f.page_url.replace(/^\//, "") }, f.title),
    f.on_disk === false ? el("span", { class: "gone" }, "gone from disk") : null,
    f.band ? el("span", { class: `band ${f.band}`, title: `score ${probability(f.score)}` },
                BANDS[f.band] || f.band) : null,
    el("span", { class: "count" }, `${plural(f.count, "moment")}${shown}`));
  return el("li", { class: "file-group", "data-video": f.video_id }, head,
            el("ul", { class: "file-moments" }, ...f.moments.map(hitItem)));
}

// Nothing was as sure as asked: the closest moments, each marked as not a confident match.
async function showClosest(params, token) {
  params.set("min_confidence", "none");
  params.set("limit", "3");
  let data;
  try {
    data = await api(`/search?${params}`);
  } catch (e) {
    return;  // the empty state already says what there is to say
  }
  if (token !== routeToken || !data.hits.length) return;
  const results = $("results");
  results.append(el("li", { class: "closest-note" }, "Closest moments (not confident matches):"));
  for (const hit of data.hits) {
    const item = hitItem(hit);
    item.classList.add("closest");
    item.querySelector(".head").append(el("span", { class: "band closest" }, "closest"));
    results.append(item);
  }
}

function searchHash(q, video, modality, confidence, by) {
  const params = new URLSearchParams({ q });
  if (video) params.set("video_id", video);
  if (modality) params.set("modality", modality);
  if (confidence) params.set("min_confidence", confidence);
  if (by) params.set("by", by);
  if (scope) params.set("where", scope);
  return `#/search?${params}`;
}

// The library's page `page` (from 1), keeping to the files in scope.
function libraryHash(page) {
  const params = new URLSearchParams(page > 1 ? { page: String(page) } : {});
  if (scope) params.set("where", scope);
  return `#/?${params}`;
}

// Said above the library and the results while they keep to files with a metadata value; its link drops it.
function showScope(path, params) {
  $("scope").hidden = !scope;
  if (!scope) return;
  const [key, ...value] = scope.split("=");
  $("scope-text").textContent = `Only files with ${key}: ${value.join("=")}`;
  const all = new URLSearchParams(params);
  all.delete("where");
  all.delete("page");
  $("scope-clear").href = `#${path || "/"}?${all}`;
}

function emptyState(q, video, modality, confident) {
  $("empty").hidden = false;
  $("empty-title").textContent = confident ? `No confident match for “${q}”` : `No moments match “${q}”`;
  const tips = [];
  const words = q.trim().split(/\s+/);
  if (words.length > 3) {
    // The words that carry the meaning: the longest ones that are not function words, in their order.
    const content = words.filter((w) => !STOP.has(w.toLowerCase()));
    const keep = new Set([...(content.length ? content : words)].sort((a, b) => b.length - a.length).slice(0, 2));
    const shorter = words.filter((w) => keep.has(w)).join(" ");
    tips.push(el("li", {}, "Use fewer words: ", el("a", { href: searchHash(shorter, video, modality) }, shorter)));
  } else {
    tips.push(el("li", {}, "Use other words, the way someone in the recording would say them."));
  }
  const languages = [...new Set(videos.map((v) => v.language).filter(Boolean))];
  tips.push(el("li", {}, "Try another language" +
    (languages.length ? `: the files here are in ${languages.map(languageName).join(", ")}.` : ".")));
  if (modality) {
    tips.push(el("li", {}, `Only ${KINDS[modality] || modality} was searched: `,
      el("a", { href: searchHash(q, video, "") }, "search every kind")));
  } else {
    tips.push(el("li", {}, "Or pick a kind of match (speech, on-screen text, pictures) in the filter."));
  }
  if (video) tips.push(el("li", {}, "Only one file was searched: ", el("a", { href: searchHash(q, "", modality) }, "search all files")));
  if (scope) {
    tips.push(el("li", {}, `Only ${$("scope-text").textContent.replace(/^Only /, "")} were searched: `,
                 el("a", { href: $("scope-clear").href }, "search all files")));
  }
  $("suggestions").replaceChildren(...tips);
}

function hitItem(hit) {
  const title = hit.title || hit.source || hit.video_id;
  // A sound file's moments may show its cover: a thumbnail does not make it a video.
  const hasVideo = hit.has_video !== undefined ? hit.has_video : hasVideoOf(hit.video_id);
  const thumb = hit.thumbnail_url ? el("img", { src: hit.thumbnail_url, alt: "", loading: "lazy" })
                                  : el("div", { class: "nothumb", "aria-hidden": "true" }, hasVideo ? "▶" : "♪");
  const page = hit.page_url || `#/video/${encodeURIComponent(hit.video_id)}?t=${hit.start}`;
  const time = el("a", { class: "time", href: page.replace(/^\//, ""), title: "Play this moment" },
                  `${clock(hit.start)}–${clock(hit.end)}`);
  const gone = hit.on_disk === false;
  // Heard on another audio track than the default one: its number, to hear it there ("audio 2 (de)").
  const heardOn = hit.modality === "speech" && hit.track ? Number((hit.track.match(/^audio (\d+)/) || [])[1]) || null : null;
  const label = `${title} at ${clock(hit.start)}${heardOn ? ` · ${hit.track}` : ""}`;
  const playHit = () => gone ? notice(`${title} is no longer where it was indexed from, so it cannot be played.`)
                             : play(hit.media_url, hit.start, label, hasVideo, heardOn);
  time.addEventListener("click", (e) => { e.preventDefault(); playHit(); });
  const head = el("div", { class: "head" },
    el("span", { class: "title", dir: "auto" }, title), time,
    gone ? el("span", { class: "gone" }, "gone from disk") : null,
    el("span", { class: `badge ${hit.modality}` }, KINDS[hit.modality] || hit.modality),
    hit.band ? el("span", { class: `band ${hit.band}`, title: `score ${probability(hit.score)}` },
                  BANDS[hit.band] || hit.band) : null,
    hit.speaker ? el("span", { class: "speaker" }, hit.speaker) : null,
    // Heard on another audio track than the one the player plays (a dub, a commentary).
    hit.track && hit.modality === "speech" ? el("span", { class: "track", title: "heard on this audio track" }, hit.track)
                                           : null,
    // The chapter the file marks that the moment lies in (an audiobook's, a film's).
    hit.in_chapter ? el("span", { class: "track in-chapter", dir: "auto", title: "in this chapter of the file" }, hit.in_chapter)
                   : null);
  // A picture without words says so, with the classes it looks like (which placed it), instead of showing nothing.
  const unnamed = !hit.text && hit.modality === "visual";
  const looks = (hit.looks_like || []).length ? `; looks like ${hit.looks_like.join(", ")}` : "";
  const snippet = unnamed ? el("p", { class: "snippet hint" }, `picture without words${looks}`)
                          : el("p", { class: "snippet", dir: "auto", lang: hit.language || undefined },
                               highlighted(hit.text || "", hit.highlights));
  const transcriptLink = el("a", { class: "video-link",
                                   href: `#/video/${encodeURIComponent(hit.video_id)}?t=${hit.start}${heardOn ? `&track=${heardOn}` : ""}` },
                            "transcript");
  // The moment's frame as a picture to search by: shots that look like it.
  const similarLink = hit.thumbnail_url && hasVideo
    ? el("a", { class: "video-link similar", href: likeHash(hit) }, "similar shots") : null;
  // The moment as a file of its own (cut by the server; the key travels in its cookie).
  const clipLink = hit.media_url && !gone
    ? el("a", { class: "video-link save", href: `${hit.media_url}/clip?start=${hit.start}&end=${hit.end}${heardOn ? `&track=${heardOn}` : ""}`,
                download: "", title: "Download this moment as a file" }, "save clip") : null;
  const item = el("li", { class: `hit${hit.band ? ` ${hit.band}` : ""}`, tabIndex: 0, "data-start": hit.start,
                          "data-end": hit.end, "data-video": hit.video_id },
                  thumb, el("div", { class: "body" }, head, snippet,
                                el("div", { class: "links" }, transcriptLink, similarLink, clipLink)));
  const go = (event) => {
    if (event.target.closest("a")) return;  // links do their own thing
    playHit();
  };
  item.addEventListener("click", go);
  item.addEventListener("keydown", (e) => { if (e.key === "Enter") go(e); });
  return item;
}

// ---- search by picture: one chosen here, or a moment's frame ("similar shots") --------------------
let picture = null;  // the picture chosen for #/picture (a page reloaded without it shows the library)

function likeHash(hit) {
  const params = new URLSearchParams({ video_id: hit.video_id, t: String(hit.start) });
  return `#/like?${params}`;
}

// Shots that look like a picture (`request` asks the server), best first.
async function runPictureSearch(request, what, token) {
  $("q").value = "";
  const data = await searched(request, `Looking for shots like ${what}…`, "Search by picture failed", token);
  if (data === null) return;
  const results = $("results");
  notice(data.hits.length ? `${plural(data.hits.length, "shot")} like ${what} (${Math.round(data.took_ms)} ms)`
                          : `No other shot looks like ${what}.`);
  for (const hit of data.hits) results.append(hitItem(hit));
}

// A picture as the server reads it: at most PICTURE_SIDE px a side, as JPEG (a phone's photo of several MB
// would pass the server's body limit; the classifier sees far fewer pixels). One the browser cannot
// decode is sent as it is, for the server to say why.
const PICTURE_SIDE = 1024;

async function shrunk(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch (e) {
    return file;
  }
  const scale = Math.min(1, PICTURE_SIDE / Math.max(bitmap.width, bitmap.height));
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(bitmap.width * scale));
  canvas.height = Math.max(1, Math.round(bitmap.height * scale));
  canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  return new Promise((resolve) => canvas.toBlob((blob) => resolve(blob || file), "image/jpeg", 0.9));
}

$("picture-button").addEventListener("click", () => $("picture-input").click());
$("picture-input").addEventListener("change", () => {
  picture = $("picture-input").files[0] || null;
  $("picture-input").value = "";
  if (!picture) return;
  if (location.hash === "#/picture") route(); else location.hash = "#/picture";
});

// ---- jobs the page follows: uploads, questions, summaries ----------------------------------------
const ENDED = new Set(["done", "failed", "cancelled", "interrupted"]);
const JOB_POLL_MS = 1000;

// ---- what the server is indexing: its ingest jobs (uploads, watched folders, the CLI through it) ----
const INGESTS_POLL_MS = 2000;

function ingestsText(active) {
  const running = active.filter((j) => j.state === "running");
  const parts = running.map((j) => {
    const p = j.progress || {};
    if (Object.values(p.now || {}).some((stages) => "download" in stages)) return "downloading a web address";
    const total = p.total || Object.values(j.counts || {}).reduce((n, c) => n + c, 0);
    return `${p.finished || 0} of ${plural(total, "file")} done` + (p.eta ? `, about ${span(p.eta)} left` : "");
  });
  const waiting = active.length - running.length;
  if (waiting) parts.push(`${plural(waiting, "job")} waiting to start`);
  return `Indexing: ${parts.join("; ")}`;
}

// While the library is shown, say what is being indexed; once a file or a job is finished, show it anew.
async function followIngests(token) {
  const line = $("indexing");
  let before = null;
  while (token === routeToken) {
    let jobs;
    try {
      jobs = await api("/jobs?kind=ingest&active=true&files=false&limit=50");
    } catch (e) {
      line.hidden = true;  // the library says so if the server is gone; this line is no more than a hint
      return;
    }
    if (token !== routeToken) return;
    const active = jobs.filter((j) => !ENDED.has(j.state));
    const finished = active.reduce((n, j) => n + ((j.progress || {}).finished || 0), 0);
    const ids = new Set(active.map((j) => j.id));
    if (before && (finished > before.finished || [...before.ids].some((id) => !ids.has(id)))) {
      loadVideos();
      refreshing = true;
      route();
      return;
    }
    before = { ids, finished };
    line.hidden = !active.length;
    line.textContent = active.length ? ingestsText(active) : "";
    await new Promise((resolve) => setTimeout(resolve, INGESTS_POLL_MS));
  }
}

// ---- adding media: each file uploaded, then indexed by the server as a job of its own ------------
// A request whose body is a file (an upload, a picture to search by). XMLHttpRequest rather than fetch: it tells
// how much of a large file has been sent.
// `control.abort`, while it is being sent, stops it (the promise then rejects with `stopped` set).
function postFile(path, file, type, sent = () => {}, control = {}) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    xhr.setRequestHeader("content-type", type);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) sent(e.loaded / e.total); };
    xhr.onerror = () => reject(new Offline(NO_SERVER));
    xhr.onabort = () => reject(Object.assign(new Error("stopped"), { stopped: true }));
    xhr.onloadend = () => { control.abort = null; };
    control.abort = () => xhr.abort();
    xhr.onload = async () => {
      if (xhr.status === 401) {
        $("key-button").hidden = false;
        await askForKey();
        postFile(path, file, type, sent, control).then(resolve, reject);
        return;
      }
      let answer;
      try { answer = JSON.parse(xhr.responseText); } catch (e) { answer = { message: xhr.statusText }; }
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve(answer);
        return;
      }
      const error = new Error(answer.message || `HTTP ${xhr.status}`);
      error.status = xhr.status;
      error.retryAfter = Number(xhr.getResponseHeader("retry-after")) || 0;
      reject(error);
    };
    xhr.send(file);
  });
}

// What an ingest job's one file came to, and whether it is in the index.
function uploadOutcome(job) {
  const files = job.files || [];
  if (files.length > 1 && job.state === "done") {  // a web page's several videos
    const done = files.filter((f) => f.state === "done");
    const missed = files.filter((f) => f.state !== "done");
    const already = done.filter((f) => f.reason).length;  // unchanged, or the same content as a file indexed
    const parts = [];
    if (done.length > already) parts.push(`${plural(done.length - already, "file")} indexed`);
    if (already) parts.push(`${already} already indexed`);
    if (missed.length) parts.push(`${missed.length} not: ${missed[0].reason}`);
    return [true, parts.join("; ")];
  }
  const file = files[0] || { state: job.state, reason: job.error || "" };
  if (job.state === "done" && file.video_id) {  // indexed, or an entry moved to it (its reason says so)
    const segments = (job.result || {}).segments;
    if (segments) return [true, `indexed: ${plural(segments, "segment")}`];
    return [true, file.reason ? `indexed: ${file.reason}` : "indexed"];
  }
  if (job.state === "done") return [true, file.reason ? `already indexed: ${file.reason}` : "already indexed"];
  if (job.state === "cancelled") return [false, "stopped: not indexed"];
  return [false, `not indexed: ${file.reason || job.error || job.state}`];
}

function indexingText(job) {
  if (job.state === "pending") return "waiting for the jobs before it";
  const progress = job.progress || {};
  const fetching = Object.values(progress.now || {}).find((stages) => "download" in stages);
  if (fetching) return fetching.download === null ? "downloading" : `downloading, ${Math.floor(fetching.download * 100)} %`;
  return progress.eta ? `indexing, about ${span(progress.eta)} left` : "indexing";
}

// One chosen file's or web address's line: its name, what is happening to it, and Stop while there is something
// to stop (its upload, a wait for room in the server's queue, its job).
function uploadLine(name, file = null, waiting = "waiting to upload") {
  const line = { file, stopped: false, control: {}, job: null, wake: null };
  line.state = el("span", { class: "state" }, waiting);
  line.stop = el("button", { type: "button", class: "stop" }, "Stop");
  line.stop.addEventListener("click", () => {
    line.stopped = true;
    line.stop.disabled = true;
    if (line.control.abort) line.control.abort();
    if (line.wake) line.wake();
    if (line.job) api(`/jobs/${encodeURIComponent(line.job)}`, "DELETE").catch(() => {});  // its next poll says
  });
  line.item = el("li", { class: "upload" }, el("span", { class: "name", dir: "auto" }, name), line.state, line.stop);
  return line;
}

function ended(line, text, outcome) {
  line.state.replaceChildren(text);
  line.item.classList.add(outcome);  // done, failed or stopped
  line.stop.remove();
}

// Upload the files one after another (they share one link) and follow each one's job; the library shows
// them once their jobs have ended.
async function addFiles(files) {
  const list = $("uploads");
  list.hidden = false;
  const lines = files.map((file) => uploadLine(file.name, file));
  list.append(...lines.map((line) => line.item));
  const jobs = [];
  for (const line of lines) {
    const size = line.file.size;
    if (line.stopped) {
      ended(line, "not uploaded: stopped", "stopped");
    } else if (maxUpload && size > maxUpload) {  // refused before a byte is sent, not after all of them
      ended(line, `not uploaded: ${megabytes(size)} is more than this server takes (${megabytes(maxUpload)})`, "failed");
    } else {
      try {
        line.job = (await whenRoom(line, () => postFile(
          `/ingest/upload?filename=${encodeURIComponent(line.file.name)}`, line.file, "application/octet-stream",
          (share) => { line.state.textContent = `uploading, ${Math.floor(share * 100)} %`; }, line.control))).id;
        if (line.stopped) await api(`/jobs/${encodeURIComponent(line.job)}`, "DELETE").catch(() => {});
        jobs.push(followUpload(line));
      } catch (e) {
        ended(line, `not uploaded: ${e.message}`, e.stopped ? "stopped" : "failed");
      }
    }
  }
  await Promise.all(jobs);
  await loadVideos();
  if (!$("library-view").hidden) {
    refreshing = true;
    route();
  }
}

// A full queue on the server (many files added at once) is waited out, as its Retry-After asks.
async function whenRoom(line, send) {
  for (;;) {
    try {
      return await send();
    } catch (e) {
      if (e.status !== 429) throw e;
      const wait = Math.max(1, e.retryAfter || 30);
      line.state.textContent = `the server's queue is full; trying again in ${span(wait)}`;
      await new Promise((resolve) => { line.wake = resolve; setTimeout(resolve, wait * 1000); });
      line.wake = null;
      if (line.stopped) throw Object.assign(new Error("stopped"), { stopped: true });
    }
  }
}

async function followUpload(line) {
  let job = { id: line.job, state: "pending" };
  try {
    for (;;) {
      job = await api(`/jobs/${encodeURIComponent(job.id)}`);
      if (ENDED.has(job.state)) break;
      line.state.textContent = line.stopped ? "stopping…" : indexingText(job);
      await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
    }
  } catch (e) {
    ended(line, `could not follow its indexing: ${e.message}`, "failed");
    return;
  }
  const [indexed, text] = uploadOutcome(job);
  const id = (job.files || []).length === 1 ? job.files[0].video_id : null;
  ended(line, indexed && id ? el("a", { href: `#/video/${encodeURIComponent(id)}` }, text) : text,
        indexed ? "done" : job.state === "cancelled" ? "stopped" : "failed");
}

// A web address: the server downloads it (a media file, or a page with one video) as its job's first step.
async function addAddress(url) {
  const list = $("uploads");
  list.hidden = false;
  const line = uploadLine(url, null, "asking the server");
  list.append(line.item);
  try {
    line.job = (await whenRoom(line, () => api("/ingest", "POST", { urls: [url] }))).id;
    if (line.stopped) await api(`/jobs/${encodeURIComponent(line.job)}`, "DELETE").catch(() => {});
  } catch (e) {
    ended(line, `not downloaded: ${e.message}`, e.stopped ? "stopped" : "failed");
    return;
  }
  await followUpload(line);
  await loadVideos();
  if (!$("library-view").hidden) {
    refreshing = true;
    route();
  }
}

$("url-button").addEventListener("click", () => {
  $("url-form").hidden = false;
  $("url-input").focus();
});
$("url-cancel").addEventListener("click", () => { $("url-form").hidden = true; });
$("url-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const url = $("url-input").value.trim();
  if (!url) return;
  $("url-input").value = "";
  $("url-form").hidden = true;
  addAddress(url);
});

$("add-button").addEventListener("click", () => $("add-input").click());
$("add-input").addEventListener("change", () => {
  const files = [...$("add-input").files];
  $("add-input").value = "";  // the same file chosen again is uploaded again
  if (files.length) addFiles(files);
});

// ---- a question, answered by the server's agent with cited moments ------------------------------

// A moment the answer cites, as a link that plays it (or says why it cannot).
function momentLink(c) {
  const title = titleOf(c.video_id);
  const gone = isGone(c.video_id);
  const link = el("a", { class: "time", href: `#/video/${encodeURIComponent(c.video_id)}?t=${c.start}`,
                         title: gone ? "Gone from disk" : "Play this moment" },
                  `${title} ${clock(c.start)}–${clock(c.end)}`);
  link.addEventListener("click", (e) => {
    e.preventDefault();
    if (gone) notice(`${title} is no longer where it was indexed from, so it cannot be played.`);
    else play(`/media/${encodeURIComponent(c.video_id)}`, c.start, `${title} at ${clock(c.start)}`, hasVideoOf(c.video_id));
  });
  return link;
}

// The answer's text with each citation marker ([video_id@start-end]) as a link to its moment.
// The language model may write in another language than the file's or the question's: its text is tagged by its
// script where that says the language (Hangul is Korean, whose lines break at spaces), else by `fallback`.
function textLanguage(text, fallback) {
  return /[\uac00-\ud7a3]/.test(text || "") ? "ko" : fallback || undefined;
}

function tagLanguage(node, lang) {
  if (lang) node.setAttribute("lang", lang);
  else node.removeAttribute("lang");
}

function answerText(text, citations) {
  const frag = document.createDocumentFragment();
  const marker = /\[([0-9A-Za-z_-]+)@(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)\]/g;
  let at = 0;
  for (const m of text.matchAll(marker)) {
    frag.append(text.slice(at, m.index));
    const cited = citations.find((c) => c.video_id === m[1] && Math.abs(c.start - Number(m[2])) < 0.05) ||
      { video_id: m[1], start: Number(m[2]), end: Number(m[3]) };
    frag.append(momentLink(cited));
    at = m.index + m[0].length;
  }
  frag.append(text.slice(at));
  return frag;
}

function showAnswer(question, job) {
  const out = (job.result || {}).output || {};
  const citations = out.citations || [];
  $("ask-status").textContent = out.status === "answered"
    ? `Answered from ${plural(citations.length, "moment")} (${out.model}, ${plural(out.steps || 0, "step")})`
    : "The archive does not seem to hold the answer.";
  tagLanguage($("ask-answer"), textLanguage(out.answer));
  $("ask-answer").replaceChildren(answerText(out.answer || "", citations));
  const list = $("ask-moments");
  list.replaceChildren(...citations.map((c) => el("li", { class: "cited" }, momentLink(c),
    isGone(c.video_id) ? el("span", { class: "gone" }, "gone from disk") : null,
    c.text ? el("q", { dir: "auto", lang: textLanguage(c.text) }, c.text) : null)));
  if (out.status !== "answered") {
    list.append(el("li", { class: "hint" }, "Search for it instead: ",
                   el("a", { href: searchHash(question, out.video_id || "", "") }, question)));
  }
}

// Follow a job until it ends, saying how it goes in `status`; `stop` asks the server to cancel it (a summary or
// question stops before the model's next step). The ended job, or null once the user has moved on (the job may
// be shared with an identical request, so it goes on).
async function follow(job, token, status, stop, working) {
  stop.hidden = false;
  stop.disabled = false;
  stop.onclick = async () => {
    stop.disabled = true;
    status.textContent = "Stopping before the next step of the language model…";
    try {
      await api(`/jobs/${encodeURIComponent(job.id)}`, "DELETE");
    } catch (e) {
      stop.disabled = false;  // it may have ended meanwhile: the next poll says so
    }
  };
  try {
    while (!ENDED.has(job.state)) {
      if (token !== routeToken) return null;
      if (!stop.disabled) status.textContent = job.state === "pending" ? "Waiting for the jobs before it…" : working;
      await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
      job = await api(`/jobs/${encodeURIComponent(job.id)}`);
    }
  } finally {
    stop.hidden = true;
  }
  return token === routeToken ? job : null;
}

async function runAsk(question, video, token) {
  show("ask-view");
  $("q").value = question;
  $("ask-question").textContent = question;
  tagLanguage($("ask-question"), textLanguage(question));
  $("ask-answer").replaceChildren();
  $("ask-moments").replaceChildren();
  $("ask-status").textContent = "";
  notice("Asking…", "loading");
  let job;
  try {
    const [key, ...value] = scope.split("=");
    job = await api("/ask", "POST", { question, video_id: video || null, ...(scope ? { where: { [key]: value.join("=") } } : {}) });
    if (token !== routeToken) return;
    notice("");
    job = await follow(job, token, $("ask-status"), $("ask-stop"), "The language model is searching the archive…");
  } catch (e) {
    if (token === routeToken) failed(e, "The question could not be answered", route);
    return;
  }
  if (job === null) return;
  if (job.state === "done") showAnswer(question, job);
  else if (job.state === "cancelled") $("ask-status").textContent = "Stopped: nothing was answered.";
  else failed(new Error(job.error || job.state), "The question could not be answered", route);
}

// ---- a file and its transcript -----------------------------------------------------------------
function clearVideoView() {
  $("video-title").textContent = "";
  $("video-meta").textContent = "";
  $("video-metadata").replaceChildren();
  $("video-metadata").hidden = true;
  $("summary-area").hidden = true;
  $("summary-status").textContent = "";
  $("summary-text").replaceChildren();
  $("chapters").replaceChildren();
  for (const fmt of ["srt", "vtt", "json"]) $(`export-${fmt}`).removeAttribute("href");
  document.querySelector("#video-view .exports").hidden = true;
  $("transcript").replaceChildren();
  $("markers").replaceChildren();
  $("markers-area").hidden = true;
  $("tracks").hidden = true;
  $("remove-button").disabled = false;
}

// An audio track as players name it: "audio 2 (de, Commentary)" (the server's own label for a moment's track).
function trackName(number, track) {
  const about = [track.language, track.title].filter(Boolean).map((x) => String(x).slice(0, 40));
  return `audio ${number}${about.length ? ` (${about.join(", ")})` : ""}`;
}

// A file of several audio tracks (a dub, a commentary): the one whose transcript is shown and heard is chosen
// here; the default one is the file's own (browsers play it), another plays through the server's copy.
function showTracks(videoId, tracks, chosen, usual) {
  const select = $("track-choice");
  select.replaceChildren(...tracks.map((track, i) => el("option", { value: String(i + 1) },
    trackName(i + 1, track) + (i + 1 === usual ? " · default" : ""))));
  select.value = String(chosen);
  select.onchange = () => {
    const n = Number(select.value);
    const at = Math.floor(fileTime(currentPlayer()) * 10) / 10;
    location.hash = `#/video/${encodeURIComponent(videoId)}?t=${at}${n === usual ? "" : `&track=${n}`}`;
  };
  $("tracks").hidden = tracks.length < 2;
}

// What the file was indexed with (a manifest's title, tags, …; a downloaded file's address, as a link).
function showMetadata(metadata) {
  const list = $("video-metadata");
  for (const [key, value] of Object.entries(metadata)) {
    const text = Array.isArray(value) ? value.join(", ") : String(value);
    const web = key === "source_url" && /^https?:\/\//i.test(text);
    // Each value (each tag) links to the library's files that have it too.
    const values = (Array.isArray(value) ? value : [value]).map(String).flatMap((v, i) => [i ? ", " : null,
      el("a", { href: `#/?${new URLSearchParams({ where: `${key}=${v}` })}`, title: `Files with ${key}: ${v}` }, v)]);
    list.append(el("dt", {}, key === "source_url" ? "from" : key),
                el("dd", { dir: "auto" }, web ? el("a", { href: text, rel: "noopener noreferrer", target: "_blank" }, text)
                                               : key === "source_url" ? text : el("span", {}, ...values)));
  }
  list.hidden = !list.children.length;
}

// Take the file out of the index (the server keeps the media file itself, except an upload's copy).
async function removeFile(v, token) {
  const sure = confirm(`Take ${v.title} out of the index? Its transcript, summary and thumbnails go; ` +
                       "a file in your folders stays where it is.");
  if (!sure || token !== routeToken) return;
  $("remove-button").disabled = true;
  try {
    await api(`/videos/${encodeURIComponent(v.video_id)}`, "DELETE");
  } catch (e) {
    $("remove-button").disabled = false;
    if (token === routeToken) failed(e, "Could not remove this file");
    return;
  }
  stopPlayback();
  told = `${v.title} was taken out of the index.`;
  location.hash = "#/";
}

// A chapter's start, as a link that plays the file from there.
function chapterTime(v, start) {
  const time = el("a", { class: "time", href: `#/video/${encodeURIComponent(v.video_id)}?t=${start}`,
                         title: "Play this chapter" }, clock(start));
  time.addEventListener("click", (e) => {
    e.preventDefault();
    play(v.media_url, start, `${v.title} at ${clock(start)}`, v.has_video);
  });
  return time;
}

// A summary with its chapters (as stored at ingest, or as a summary job made it); each chapter's time plays it.
function showSummary(v, text, chapters, citations) {
  tagLanguage($("summary-text"), textLanguage(text));
  $("summary-text").replaceChildren(answerText(text || "", citations || []));
  $("chapters").replaceChildren(...chapters.map((c) => el("li", { class: "chapter" }, chapterTime(v, c.start),
    el("div", { dir: "auto", lang: textLanguage(`${c.title} ${c.summary}`, c.generated ? undefined : v.language) },
       el("strong", {}, c.title), " ", c.summary))));
}

// The chapters the file itself marks (an audiobook's, a podcast's, a film's), each played from its start.
function showMarkers(v) {
  const chapters = (v.probe || {}).chapters || [];
  $("markers").replaceChildren(...chapters.map((c) => el("li", { class: "chapter" }, chapterTime(v, c.start),
                                                         el("div", { dir: "auto" }, c.title))));
  $("markers-area").hidden = !chapters.length;
}

// No summary was made at ingest: the button asks the server's agent for one (a summary job).
async function summarise(v, token) {
  const status = $("summary-status");
  $("summarise-button").hidden = true;
  let job;
  try {
    job = await api("/summarize", "POST", { video_id: v.video_id });
    job = await follow(job, token, status, $("summarise-stop"), "The language model is reading the file…");
  } catch (e) {
    if (token !== routeToken) return;
    status.textContent = `The summary could not be made: ${e.message}`;
    $("summarise-button").hidden = false;
    return;
  }
  if (job === null) return;
  const out = (job.result || {}).output || {};
  if (job.state === "done" && out.status !== "nothing_to_summarise") {
    status.textContent = `Made by ${out.model} just now (not stored: ingest with summaries to keep one).`;
    showSummary(v, out.summary, out.chapters || [], out.citations);
  } else {
    status.textContent = job.state === "cancelled" ? "Stopped: no summary was made."
      : job.state === "done" ? out.summary : `The summary could not be made: ${job.error || job.state}`;
    $("summarise-button").hidden = job.state === "done";
  }
}

async function showVideo(videoId, t, token, track = null) {
  show("video-view");
  clearVideoView();
  notice("Loading…", "loading");
  let v;
  try {
    v = await api(`/videos/${encodeURIComponent(videoId)}`);
  } catch (e) {
    if (token !== routeToken) return;
    stopPlayback();  // the previous file must not go on playing under an error about this one
    $("video-view").hidden = true;
    failed(e, "Could not load this file", e instanceof Offline ? route : null);
    return;
  }
  if (token !== routeToken) return;
  notice("");
  $("video-title").textContent = v.title;
  const lang = v.language ? ` · language ${v.language}` : "";
  const name = v.source.split(/[\\/]/).pop();  // the title is a manifest's: the file's name is said too
  $("video-meta").textContent = (name !== v.title ? `${name} · ` : "") +
    `${clock(v.duration || 0)} · ${v.has_video ? "video" : "audio"}${lang} · ` +
    plural(v.segments, "segment") + (v.on_disk ? "" : " · gone from disk");
  const { title, ...metadata } = v.metadata || {};
  showMetadata(title === v.title ? metadata : v.metadata || {});
  showMarkers(v);
  const tracks = (v.probe || {}).audio_tracks || [];
  const usual = Math.max(0, tracks.findIndex((x) => x.default)) + 1;  // as players number them
  const heard = track && track !== usual && track <= tracks.length ? track : null;  // another track than the default
  showTracks(videoId, tracks, heard || usual, usual);
  let lines = v.transcript;
  let untranscribed = null;
  if (heard) {
    try {
      lines = await api(`/videos/${encodeURIComponent(videoId)}/transcript?track=${heard}`);
    } catch (e) {
      if (e instanceof Offline) return failed(e, "Could not load this file", route);
      lines = [];
      untranscribed = e.message;  // left out by speech.audio_tracks when it was indexed
    }
    if (token !== routeToken) return;
  }
  for (const fmt of ["srt", "vtt", "json"]) {
    $(`export-${fmt}`).href = `/videos/${encodeURIComponent(videoId)}/transcript?format=${fmt}${heard ? `&track=${heard}` : ""}`;
  }
  document.querySelector("#video-view .exports").hidden = !lines.length;
  $("summary-area").hidden = false;
  $("summarise-button").hidden = Boolean(v.summary);
  $("summarise-button").onclick = () => summarise(v, token);
  $("remove-button").onclick = () => removeFile(v, token);
  if (v.summary) {
    $("summary-status").textContent = `Made by ${v.summary.model} when the file was indexed.`;
    showSummary(v, v.summary.text, v.summary.chapters, []);
  } else {
    $("summary-status").textContent = "No summary was made when this file was indexed.";
  }
  const list = $("transcript");
  if (!lines.length) {
    list.append(el("li", { class: "hint" }, untranscribed ? `No transcript of this track: ${untranscribed}.`
                                                          : `No speech was transcribed in this ${heard ? "track" : "file"}.`));
  }
  for (const line of lines) {
    const time = el("a", { class: "time", href: `#/video/${encodeURIComponent(videoId)}?t=${line.start}${heard ? `&track=${heard}` : ""}` },
                    clock(line.start));
    const item = el("li", { class: "line", "data-start": line.start, "data-end": line.end }, time,
      line.speaker ? el("span", { class: "speaker" }, line.speaker) : null,
      el("span", { class: "text", dir: "auto", lang: line.language || v.language || undefined }, line.text));
    item.addEventListener("click", (e) => {
      e.preventDefault();
      play(v.media_url, line.start, `${v.title} at ${clock(line.start)}${heard ? ` · ${trackName(heard, tracks[heard - 1])}` : ""}`,
           v.has_video, heard);
    });
    list.append(item);
  }
  if (!v.on_disk) {
    stopPlayback();
    notice(`${v.title} is no longer where it was indexed from, so it cannot be played; ` +
           "Remove from index, below, takes it out.");
    return;
  }
  play(v.media_url, t || 0, v.title + (heard ? ` · ${trackName(heard, tracks[heard - 1])}` : ""), v.has_video, heard);
}

// Mark the transcript line being played.
for (const p of [$("player"), $("audio-player")]) {
  p.addEventListener("timeupdate", () => {
    const now = fileTime(p);
    for (const line of document.querySelectorAll("#transcript .line")) {
      line.classList.toggle("current", now >= Number(line.dataset.start) && now < Number(line.dataset.end));
    }
  });
}

// ---- routing: #/?page=N  #/search?q=…(&by=file)  #/ask?q=…  #/video/ID?t=… ---------------------------------
function route() {
  const token = ++routeToken;
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  if (path !== "/search") shownBefore = null;  // "more" was pressed, then another view opened: nothing to keep
  scope = ["/search", "/ask", "/", ""].includes(path || "") ? (params.get("where") || "").trim() : "";
  showScope(path, params);
  const video = (path || "").match(/^\/video\/([^/]+)$/);
  if (video) {
    return showVideo(decodeURIComponent(video[1]), Number(params.get("t")) || 0, token, Number(params.get("track")) || null);
  }
  const q = (params.get("q") || "").trim();
  if (path === "/search" && q) {
    return runSearch(q, params.get("video_id"), params.get("modality"), token, params.get("min_confidence"),
                     params.get("by"), resultsLimit(params.get("limit")));
  }
  if (path === "/ask" && q) return runAsk(q, params.get("video_id"), token);
  if (path === "/like" && params.get("video_id")) {
    // The moment's shot, as the index keeps its frame; the server leaves that shot out.
    const shot = new URLSearchParams({ video_id: params.get("video_id"), t: String(Number(params.get("t")) || 0),
                                       limit: "20" });
    return runPictureSearch(() => api(`/search/like?${shot}`),
                            `${titleOf(shot.get("video_id"))} at ${clock(Number(shot.get("t")))}`, token);
  }
  if (path === "/picture" && picture) {
    const chosen = picture;
    return runPictureSearch(async () => {
      const image = await shrunk(chosen);
      return postFile("/search/image?limit=20", image, image.type || "image/jpeg");
    }, chosen.name, token);
  }
  return showLibrary(Math.max(0, (Number(params.get("page")) || 1) - 1), token);
}

$("search-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const q = $("q").value.trim();
  const hash = q ? searchHash(q, $("video-filter").value, $("modality-filter").value, $("confidence-filter").value,
                             $("group-filter").value) : libraryHash(1);
  if (location.hash === hash) route(); else location.hash = hash;
});
$("ask-button").addEventListener("click", () => {
  const q = $("q").value.trim();
  if (!q) { $("q").focus(); return; }
  const params = new URLSearchParams({ q });
  if ($("video-filter").value) params.set("video_id", $("video-filter").value);
  if (scope) params.set("where", scope);
  const hash = `#/ask?${params}`;
  if (location.hash === hash) route(); else location.hash = hash;  // the same question again is asked again
});
$("key-button").addEventListener("click", () => askForKey().then(() => { loadVideos(); route(); }));
window.addEventListener("hashchange", route);
window.addEventListener("online", () => { if ($("notice").className === "offline") route(); });
measureSticky();
loadVideos().then(route);
