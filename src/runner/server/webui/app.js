// The chat page of `libt2p serve`: conversations kept in localStorage, answers streamed from
// /v1/chat/completions. Everything that came from outside (the model's text, the server's
// errors, conversation titles) is put into the page as text (textContent, createTextNode),
// never as HTML; the server's Content-Security-Policy forbids inline scripts on top of that.

import { render, copyText } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const KEYS = { conversations: "t2p.conversations", current: "t2p.current", settings: "t2p.settings", apiKey: "t2p.apiKey" };
const SETTINGS = ["system", "temperature", "top_p", "max_tokens", "seed", "extra", "api_key"];

function load(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback;
  }
}

function save(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    // Full or disabled storage: the chat still works, it just will not survive a reload.
    showSettingsError("could not save in this browser's storage: " + e.message);
  }
}

/** The stored conversations that have the expected shape (storage is shared with anything on this origin). */
function loadConversations() {
  const all = load(KEYS.conversations, []);
  return (Array.isArray(all) ? all : []).filter(
    (c) => c && typeof c.id === "string" && Array.isArray(c.messages) &&
      c.messages.every((m) => m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string"),
  );
}

let conversations = loadConversations();
let currentId = load(KEYS.current, null);
let settings = Object.assign({}, load(KEYS.settings, {}));
settings.api_key = load(KEYS.apiKey, "");

/** The request in flight: {conv, msg, controller, el} (el: the message's view, if shown). */
let live = null;

const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function current() {
  let conv = conversations.find((c) => c.id === currentId);
  if (!conv) {
    conv = conversations[0] || newConversation();
    currentId = conv.id;
  }
  return conv;
}

function newConversation() {
  const conv = { id: newId(), title: "New chat", messages: [], created: Date.now() };
  conversations.unshift(conv);
  return conv;
}

function persist() {
  // A message still streaming is saved as far as it got (a reload shows it stopped there).
  save(KEYS.conversations, conversations);
  save(KEYS.current, currentId);
}

// ---- the conversation list ----

function renderList() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conv of conversations) {
    const li = document.createElement("li");
    li.dataset.id = conv.id;
    if (conv.id === currentId) li.className = "current";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = conv.title || "Untitled";
    open.title = conv.title || "Untitled";
    open.addEventListener("click", () => select(conv.id));
    const rename = smallButton("Rename", "rename", () => startRename(li, conv));
    const del = smallButton("Delete", "delete", () => {
      // Two clicks: a conversation is not lost to one slip.
      if (del.classList.contains("confirm")) return remove(conv.id);
      del.classList.add("confirm");
      del.textContent = "Delete?";
      setTimeout(() => {
        del.classList.remove("confirm");
        del.textContent = "Delete";
      }, 3000);
    });
    li.append(open, rename, del);
    list.append(li);
  }
  $("title").textContent = current().title || "Untitled";
}

function smallButton(label, cls, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "small " + cls;
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

function startRename(li, conv) {
  const input = document.createElement("input");
  input.className = "rename-input";
  input.value = conv.title;
  input.maxLength = 200;
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    if (keep && input.value.trim()) conv.title = input.value.trim();
    persist();
    renderList();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

function select(id) {
  currentId = id;
  if (!live) $("stats").textContent = "";
  persist();
  renderAll();
  document.body.classList.remove("show-side");
}

function remove(id) {
  if (live && live.conv.id === id) live.controller.abort();
  conversations = conversations.filter((c) => c.id !== id);
  if (currentId === id) currentId = conversations[0] ? conversations[0].id : newConversation().id;
  persist();
  renderAll();
}

// ---- the messages ----

function renderAll() {
  renderList();
  renderMessages();
  setBusy(live !== null);
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  const conv = current();
  if (live) live.el = null;
  if (!conv.messages.length) {
    const hint = document.createElement("p");
    hint.className = "empty muted";
    hint.textContent = "Send a message to start. Settings (system prompt, sampling, API key) are in the side panel.";
    box.append(hint);
  }
  conv.messages.forEach((msg, i) => {
    const el = messageView(conv, msg, i);
    if (live && live.msg === msg) live.el = el;
    box.append(el);
  });
  box.scrollTop = box.scrollHeight;
}

function messageView(conv, msg, index) {
  const el = document.createElement("article");
  el.className = "msg " + msg.role;
  el.dataset.role = msg.role;
  fillMessage(el, conv, msg, index);
  return el;
}

/** (Re)builds a message's view from the message. */
function fillMessage(el, conv, msg, index) {
  el.dataset.state = msg.pending ? "streaming" : msg.error ? "error" : msg.stopped ? "stopped" : "done";
  const head = document.createElement("div");
  head.className = "msg-head";
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = msg.role === "user" ? "You" : "Assistant";
  head.append(who);
  const body = document.createElement("div");
  body.className = "content";
  if (msg.role === "assistant") {
    const source = smallButton("Source", "source", () => {
      const showing = el.classList.toggle("show-source");
      source.textContent = showing ? "Formatted" : "Source";
      fillBody(body, msg, showing);
    });
    head.append(source, smallButton("Copy", "copy", (e) => copyText(msg.content, e.currentTarget)));
  }
  el.replaceChildren(head);
  if (msg.reasoning) {
    // The reasoning the server separated, folded: the answer is what the reader wants first.
    const details = document.createElement("details");
    details.className = "reasoning";
    const summary = document.createElement("summary");
    summary.textContent = msg.pending && !msg.content ? "Reasoning…" : "Reasoning";
    const text = document.createElement("div");
    text.className = "reasoning-text";
    text.textContent = msg.reasoning;
    details.append(summary, text);
    el.append(details);
  }
  fillBody(body, msg, el.classList.contains("show-source"));
  el.append(body);
  if (msg.pending && !msg.content && !msg.reasoning) body.append(dots());
  if (msg.stats || msg.stopped) {
    const stats = document.createElement("div");
    stats.className = "stats muted";
    stats.textContent = [msg.stopped ? "stopped" : "", msg.stats || ""].filter(Boolean).join(" · ");
    el.append(stats);
  }
  if (msg.error) el.append(errorView(conv, msg, index));
}

function fillBody(body, msg, source) {
  body.replaceChildren();
  if (msg.role === "user" || source) {
    // The user's own text, and the answer's source, are shown exactly as written.
    const pre = document.createElement("div");
    pre.className = msg.role === "user" ? "plain" : "plain source";
    pre.textContent = msg.content;
    body.append(pre);
  } else {
    body.append(render(msg.content));
  }
}

function dots() {
  const d = document.createElement("span");
  d.className = "dots";
  d.textContent = "…";
  return d;
}

/** An error in place, with what can be done about it: a key to enter (401), a retry. */
function errorView(conv, msg, index) {
  const box = document.createElement("div");
  box.className = "error";
  const text = document.createElement("p");
  const status = msg.error.status;
  const what = {
    401: "The server wants an API key (started with --api-key). Enter it below; it is kept in this browser.",
    413: "The conversation is too large for the server to accept: start a new chat or delete old ones.",
    429: "The server is busy. Retry in a moment.",
    503: "The server is busy: every slot is taken and its queue is full. Retry in a moment.",
  }[status];
  text.textContent = (what ? what + " " : "") + (status ? `(${status}) ` : "") + msg.error.message;
  box.append(text);
  const retry = () => {
    conv.messages.splice(index, 1);
    generate(conv);
  };
  if (status === 401) {
    const key = document.createElement("input");
    key.type = "password";
    key.className = "key-input";
    key.placeholder = "API key";
    key.autocomplete = "off";
    const go = () => {
      setSetting("api_key", key.value.trim());
      $("set-api_key").value = settings.api_key;
      retry();
    };
    key.addEventListener("keydown", (e) => {
      if (e.key === "Enter") go();
    });
    box.append(key, smallButton("Save key and retry", "retry", go));
  } else if (index === conv.messages.length - 1) {
    box.append(smallButton("Retry", "retry", retry));
  }
  return box;
}

// ---- sending and streaming ----

function setBusy(busy) {
  document.body.dataset.busy = busy ? "1" : "0";
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

function send() {
  const input = $("input");
  const text = input.value;
  if (!text.trim() || live) return;
  const conv = current();
  if (!conv.messages.length && (!conv.title || conv.title === "New chat")) {
    conv.title = text.trim().replace(/\s+/g, " ").slice(0, 60);
  }
  conv.messages.push({ role: "user", content: text });
  input.value = "";
  generate(conv);
}

/** The request body: the conversation (with the system prompt) and the settings that are set. */
function requestBody(conv) {
  const messages = [];
  if (settings.system && settings.system.trim()) messages.push({ role: "system", content: settings.system });
  for (const m of conv.messages) {
    // An answer that failed before any text is not part of the conversation.
    if (m.role === "assistant" && !m.content) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const extra = parseExtra();
  if (extra === undefined) throw new Error("the extra request fields (settings) are not a JSON object");
  // The extra fields first: the settings and the streaming fields the page needs win.
  const body = Object.assign({}, extra);
  for (const [name, int] of [["temperature", false], ["top_p", false], ["max_tokens", true], ["seed", true]]) {
    const v = String(settings[name] ?? "").trim();
    if (v !== "") body[name] = int ? parseInt(v, 10) : parseFloat(v);
  }
  return Object.assign(body, { messages, stream: true, stream_options: { include_usage: true } });
}

/** The extra fields setting as an object ({} when empty), or undefined when it is not one. */
function parseExtra() {
  const s = (settings.extra || "").trim();
  if (!s) return {};
  try {
    const v = JSON.parse(s);
    return v && typeof v === "object" && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

async function generate(conv) {
  const msg = { role: "assistant", content: "", reasoning: "", pending: true };
  conv.messages.push(msg);
  const controller = new AbortController();
  live = { conv, msg, controller, el: null };
  persist();
  if (conv.id === currentId) renderAll();
  const started = performance.now();
  let first = null;
  let pieces = 0;
  let usage = null;
  try {
    const headers = { "Content-Type": "application/json" };
    if (settings.api_key) headers.Authorization = "Bearer " + settings.api_key;
    const resp = await fetch("/v1/chat/completions", {
      method: "POST",
      headers,
      body: JSON.stringify(requestBody(conv)),
      signal: controller.signal,
    });
    if (!resp.ok) {
      msg.error = { status: resp.status, message: await errorMessage(resp) };
    } else {
      for await (const data of events(resp.body)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) {
          msg.error = { status: 0, message: String(chunk.error.message ?? "the server failed") };
          break;
        }
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (!delta) continue;
        const text = typeof delta.content === "string" ? delta.content : "";
        const thought = typeof delta.reasoning_content === "string" ? delta.reasoning_content : "";
        if (text || thought) {
          if (first === null) first = performance.now();
          pieces++;
          msg.content += text;
          msg.reasoning += thought;
          update(msg, started, first, pieces);
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") msg.stopped = true;
    else msg.error = { status: 0, message: "the request failed: " + e.message };
  }
  const end = performance.now();
  delete msg.pending;
  if (!msg.reasoning) delete msg.reasoning;
  if (!msg.error && (first !== null || usage)) msg.stats = stats(usage, pieces, started, first, end);
  live = null;
  persist();
  if (conv.id === currentId) renderAll();
  $("stats").textContent = msg.stats || "";
}

/** The `data:` payloads of a server-sent event stream, as they arrive. */
async function* events(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line.startsWith("data:")) yield line.slice(5).replace(/^ /, "");
    }
  }
}

/** The OpenAI-shaped error's message, or the status text. */
async function errorMessage(resp) {
  const text = await resp.text();
  try {
    const m = JSON.parse(text).error.message;
    if (typeof m === "string") return m;
  } catch {
    // Not the API's JSON (a proxy's page, say): its text, shortened, is all there is.
  }
  return (text || resp.statusText).slice(0, 500);
}

function stats(usage, pieces, started, first, end) {
  const generated = usage ? usage.completion_tokens : pieces;
  const parts = [];
  if (usage) parts.push(`prompt ${usage.prompt_tokens} tokens`);
  parts.push(`generated ${usage ? "" : "~"}${generated}`);
  // The decode rate, from the first token on (the prompt's evaluation is the first-token time).
  if (first !== null && generated > 1 && end > first) {
    parts.push(`${((generated - 1) / ((end - first) / 1000)).toFixed(1)} tok/s`);
  }
  if (first !== null) parts.push(`first token ${((first - started) / 1000).toFixed(2)} s`);
  return parts.join(" · ");
}

let frame = 0;

/** Redraws the streaming message once per frame, however many pieces came in it. */
function update(msg, started, first, pieces) {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (!live || live.msg !== msg) return;
    const secs = (performance.now() - first) / 1000;
    $("stats").textContent = `generating · ${pieces} pieces` + (secs > 0.2 ? ` · ${((pieces - 1) / secs).toFixed(1)} tok/s` : "");
    if (!live.el) return;
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    fillMessage(live.el, live.conv, msg, live.conv.messages.indexOf(msg));
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

// ---- settings ----

function setSetting(name, value) {
  settings[name] = value;
  if (name === "api_key") {
    save(KEYS.apiKey, value);
  } else {
    const { api_key, ...rest } = settings;
    save(KEYS.settings, rest);
  }
}

function showSettingsError(text) {
  const p = $("settings-error");
  p.textContent = text;
  p.hidden = !text;
}

function bindSettings() {
  for (const name of SETTINGS) {
    const input = $("set-" + name);
    input.value = settings[name] ?? "";
    input.addEventListener("input", () => {
      setSetting(name, input.value);
      if (name === "extra") showSettingsError(parseExtra() === undefined ? "Extra request fields: not a JSON object." : "");
      if (name === "api_key") loadModel();
    });
  }
}

/** The model's name in the side panel (quietly nothing without the right key). */
async function loadModel() {
  try {
    const headers = settings.api_key ? { Authorization: "Bearer " + settings.api_key } : {};
    const resp = await fetch("/v1/models", { headers });
    const data = resp.ok ? await resp.json() : null;
    $("model").textContent = data && data.data && data.data[0] ? String(data.data[0].id) : "";
  } catch {
    $("model").textContent = "";
  }
}

// ---- wiring ----

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
$("input").addEventListener("keydown", (e) => {
  // Enter sends; Shift+Enter (and Enter while an input method composes) is a new line.
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
$("stop").addEventListener("click", () => live && live.controller.abort());
$("new-chat").addEventListener("click", () => {
  const conv = current();
  if (conv.messages.length) currentId = newConversation().id;
  persist();
  renderAll();
  document.body.classList.remove("show-side");
  $("input").focus();
});
$("menu").addEventListener("click", () => document.body.classList.toggle("show-side"));
$("close-side").addEventListener("click", () => document.body.classList.remove("show-side"));
window.addEventListener("storage", (e) => {
  // Another tab changed the conversations: take its copy unless this one is streaming.
  if (e.key === KEYS.conversations && !live) {
    conversations = loadConversations();
    renderAll();
  }
});

// A message left streaming by a closed page ends where it was saved.
for (const conv of conversations) {
  for (const m of conv.messages || []) {
    if (m.pending) {
      delete m.pending;
      m.stopped = true;
    }
  }
}
currentId = current().id;
bindSettings();
renderAll();
loadModel();
