// The mediaindex web page: search, play moments, read transcripts. Plain DOM, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const player = $("player");
let videos = [];

// ---- API access --------------------------------------------------------------------------------
async function api(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  if (res.status === 401) {
    await askForKey();
    return api(path);
  }
  const body = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) throw new Error(body.message || `HTTP ${res.status}`);
  return body;
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

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c);
  return node;
}

// Text with <mark> around the spans the server matched; built from text nodes, never from HTML.
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

function status(message) { $("status").textContent = message || ""; }

// ---- the player ----------------------------------------------------------------------------------
function play(mediaUrl, start, label) {
  $("player-area").hidden = false;
  $("now-playing").textContent = label || "";
  const seek = () => {
    player.currentTime = start;
    player.play().catch(() => {});  // autoplay may be refused; the position is set either way
  };
  if (player.dataset.src === mediaUrl && player.readyState >= 1) {
    seek();
  } else {
    player.dataset.src = mediaUrl;
    player.addEventListener("loadedmetadata", seek, { once: true });
    player.src = mediaUrl;
  }
}

// ---- search ------------------------------------------------------------------------------------
async function loadVideos() {
  try {
    videos = await api("/videos");
  } catch (e) {
    status(`Could not list videos: ${e.message}`);
    return;
  }
  const select = $("video-filter");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "" }, "all videos"));
  for (const v of videos) select.append(el("option", { value: v.video_id }, v.title));
  select.value = chosen;
}

async function runSearch(q, video, modality) {
  $("search-view").hidden = false;
  $("video-view").hidden = true;
  $("q").value = q;
  $("video-filter").value = video || "";
  $("modality-filter").value = modality || "";
  const results = $("results");
  results.replaceChildren();
  if (!q.trim()) { status(""); return; }
  status("Searching…");
  const params = new URLSearchParams({ q, limit: "20" });
  if (video) params.set("video_id", video);
  if (modality) params.set("modality", modality);
  let data;
  try {
    data = await api(`/search?${params}`);
  } catch (e) {
    status(`Search failed: ${e.message}`);
    return;
  }
  status(data.hits.length ? `${data.hits.length} moments (${Math.round(data.took_ms)} ms)` : "No moments found.");
  for (const hit of data.hits) results.append(hitItem(hit));
}

function hitItem(hit) {
  const thumb = hit.thumbnail_url ? el("img", { src: hit.thumbnail_url, alt: "", loading: "lazy" })
                                  : el("div", { class: "nothumb" });
  const title = el("div", {},
    el("span", { class: "title" }, hit.title),
    el("span", { class: "time" }, `${clock(hit.start)}–${clock(hit.end)}`),
    el("span", { class: `badge ${hit.modality}` }, hit.modality),
    el("a", { class: "video-link", href: `#/video/${encodeURIComponent(hit.video_id)}?t=${hit.start}` }, "transcript"));
  const snippet = el("p", { class: "snippet" }, highlighted(hit.text || "", hit.highlights));
  const item = el("li", { class: "hit", tabIndex: 0, "data-start": hit.start, "data-end": hit.end,
                          "data-video": hit.video_id }, thumb, el("div", { class: "body" }, title, snippet));
  const go = (event) => {
    if (event.target.closest("a")) return;  // the transcript link navigates instead
    play(hit.media_url, hit.start, `${hit.title} at ${clock(hit.start)}`);
  };
  item.addEventListener("click", go);
  item.addEventListener("keydown", (e) => { if (e.key === "Enter") go(e); });
  return item;
}

// ---- a video and its transcript ----------------------------------------------------------------
async function showVideo(videoId, t) {
  $("search-view").hidden = true;
  $("video-view").hidden = false;
  const list = $("transcript");
  list.replaceChildren();
  status("Loading…");
  let v;
  try {
    v = await api(`/videos/${encodeURIComponent(videoId)}`);
  } catch (e) {
    status(`Could not load the video: ${e.message}`);
    return;
  }
  status("");
  $("video-title").textContent = v.title;
  const lang = v.language ? `, language ${v.language}` : "";
  $("video-meta").textContent = `${clock(v.duration || 0)}${lang}, ${v.segments} segments`;
  for (const fmt of ["srt", "vtt", "json"]) $(`export-${fmt}`).href = `/videos/${encodeURIComponent(videoId)}/transcript?format=${fmt}`;
  if (!v.transcript.length) list.append(el("li", {}, "No speech was transcribed in this file."));
  for (const line of v.transcript) {
    const item = el("li", { class: "line", "data-start": line.start, "data-end": line.end },
      el("span", { class: "time" }, clock(line.start)), el("span", {}, line.text));
    item.addEventListener("click", () => play(v.media_url, line.start, `${v.title} at ${clock(line.start)}`));
    list.append(item);
  }
  play(v.media_url, t || 0, v.title);
}

// Mark the transcript line being played.
player.addEventListener("timeupdate", () => {
  for (const line of document.querySelectorAll("#transcript .line")) {
    const on = player.currentTime >= Number(line.dataset.start) && player.currentTime < Number(line.dataset.end);
    line.classList.toggle("current", on);
  }
});

// ---- routing: #/search?q=…  and  #/video/ID?t=… ------------------------------------------------
function route() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const video = path.match(/^\/video\/([^/]+)$/);
  if (video) showVideo(decodeURIComponent(video[1]), Number(params.get("t")) || 0);
  else runSearch(params.get("q") || "", params.get("video_id"), params.get("modality"));
}

$("search-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const params = new URLSearchParams({ q: $("q").value });
  if ($("video-filter").value) params.set("video_id", $("video-filter").value);
  if ($("modality-filter").value) params.set("modality", $("modality-filter").value);
  const hash = `#/search?${params}`;
  if (location.hash === hash) route(); else location.hash = hash;
});
$("key-button").addEventListener("click", () => askForKey().then(() => { loadVideos(); route(); }));
window.addEventListener("hashchange", route);
loadVideos().then(route);
