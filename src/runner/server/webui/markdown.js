// A small Markdown subset rendered as DOM nodes built from text: paragraphs, bullet and
// numbered lists, **strong**, *emphasis* / _emphasis_, `inline code` and ``` fenced code
// blocks (with a copy button). Every piece of the source reaches the page through
// document.createTextNode, never through an HTML parser, so what the model writes is shown,
// never run: `<script>` is seven characters on the screen.

/** Renders `src` into a new DocumentFragment. */
export function render(src) {
  const out = document.createDocumentFragment();
  for (const block of blocks(src)) {
    out.append(renderBlock(block));
  }
  return out;
}

/** Splits the text into blocks: {kind: "code", lang, text}, {kind: "list", ordered, items}, {kind: "p", text}. */
function blocks(src) {
  const lines = src.split("\n");
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push({ kind: "p", text: para.join("\n") });
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/);
    if (fence) {
      flush();
      const body = [];
      i++;
      // An unclosed fence (still streaming) runs to the end of the text.
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      out.push({ kind: "code", lang: fence[2], text: body.join("\n") });
      continue;
    }
    const item = line.match(/^\s*(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = item[2] !== undefined;
      const last = out[out.length - 1];
      if (last && last.kind === "list" && last.ordered === ordered && last.open) {
        last.items.push(item[3]);
      } else {
        out.push({ kind: "list", ordered, start: ordered ? Number(item[2]) : 1, items: [item[3]], open: true });
      }
      continue;
    }
    const last = out[out.length - 1];
    if (line.trim() === "") {
      flush();
      if (last && last.kind === "list") last.open = false;
    } else if (!para.length && last && last.kind === "list" && last.open && /^\s+/.test(line)) {
      // An indented line right after an item continues it.
      last.items[last.items.length - 1] += "\n" + line.trim();
    } else {
      if (last && last.kind === "list") last.open = false;
      para.push(line);
    }
  }
  flush();
  return out;
}

function renderBlock(b) {
  if (b.kind === "code") return codeBlock(b.text, b.lang);
  if (b.kind === "list") {
    const list = document.createElement(b.ordered ? "ol" : "ul");
    if (b.ordered && b.start !== 1) list.start = b.start;
    for (const text of b.items) {
      const li = document.createElement("li");
      li.append(inline(text));
      list.append(li);
    }
    return list;
  }
  const p = document.createElement("p");
  p.append(inline(b.text));
  return p;
}

/** A fenced block: the code as text, and a button copying it. */
function codeBlock(text, lang) {
  const wrap = document.createElement("div");
  wrap.className = "code";
  const bar = document.createElement("div");
  bar.className = "code-bar";
  const name = document.createElement("span");
  name.textContent = lang || "code";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.textContent = "Copy";
  copy.addEventListener("click", () => copyText(text, copy));
  bar.append(name, copy);
  const pre = document.createElement("pre");
  const code = document.createElement("code");
  code.textContent = text;
  pre.append(code);
  wrap.append(bar, pre);
  return wrap;
}

/** Copies `text` to the clipboard and says so on `button` for a moment. */
export function copyText(text, button) {
  const done = (label) => {
    button.textContent = label;
    setTimeout(() => (button.textContent = "Copy"), 1200);
  };
  // The clipboard API needs a secure context (localhost is one; a LAN address is not).
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(() => done("Copied"), () => done("Copy failed"));
  } else {
    done("Copy failed");
  }
}

/** Inline spans: `code` first (nothing inside it is Markdown), then **strong** and *em* / _em_; line breaks kept. */
function inline(text) {
  const frag = document.createDocumentFragment();
  const parts = text.split(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/);
  // split with two groups gives [text, ticks, code, text, ticks, code, ..., text].
  for (let i = 0; i < parts.length; i += 3) {
    emphasis(parts[i], frag);
    if (i + 2 < parts.length) {
      const code = document.createElement("code");
      code.textContent = parts[i + 2];
      frag.append(code);
    }
  }
  return frag;
}

const EMPHASIS = /\*\*(?=\S)([\s\S]*?\S)\*\*|\*(?=\S)([^*]*?\S)\*|(?<![\w])_(?=\S)([^_]*?\S)_(?![\w])/;

function emphasis(text, into) {
  while (text) {
    const m = EMPHASIS.exec(text);
    if (!m) break;
    lines(text.slice(0, m.index), into);
    const el = document.createElement(m[1] !== undefined ? "strong" : "em");
    emphasis(m[1] ?? m[2] ?? m[3], el);
    into.append(el);
    text = text.slice(m.index + m[0].length);
  }
  lines(text, into);
}

/** Text with its newlines as <br>. */
function lines(text, into) {
  text.split("\n").forEach((line, i) => {
    if (i) into.append(document.createElement("br"));
    if (line) into.append(document.createTextNode(line));
  });
}
