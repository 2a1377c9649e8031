// Small DOM helpers shared by the views: elements (text only: server data is never parsed as HTML), dialogs, the
// status line, error wording, the trace table and the cited-passage view.

import { request } from "./api.js";
import { t } from "./i18n.js";

/** An element: el("td", {class: "x", onclick: f}, "text", child, ...). Strings become text nodes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  node.append(...children.flat().filter((c) => c !== undefined && c !== null && c !== false));
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);

/** One line in the status bar (role=status: read out by screen readers); errors stay until the next message. */
export function say(text, kind = "info") {
  const bar = $("#status");
  bar.textContent = text;
  bar.dataset.kind = kind;
  bar.hidden = !text;
  clearTimeout(say.timer);
  if (text && kind === "info") say.timer = setTimeout(() => (bar.hidden = true), 6000);
}

/** What went wrong, in words a user can act on. */
export function describe(err) {
  if (err.name === "AbortError") return "";
  if (!("status" in err)) return t("err.request", { message: err.message || String(err) });
  if (err.status === 0) return t("err.network", { message: err.message });
  if (err.status === 403) return t("err.scope", { message: err.message });
  if (err.status === 429) return t("err.limited", { message: err.message, retry: err.retryAfter || "?" });
  if (err.status >= 500) return t("err.server", { status: err.status, message: err.message });
  return t("err.request", { message: err.message });
}

/** Open `dialog` modally; its returnValue starts empty (Escape keeps the last one otherwise). */
export function openDialog(dialog) {
  dialog.returnValue = "";
  if (!dialog.open) dialog.showModal();
}

/** A yes/no question in the page's own dialog; resolves true on OK. */
export function confirmDialog(question) {
  return promptDialog(question, null);
}

/** A question with a text answer (null value: yes/no); resolves the text, true, or null when cancelled. */
export function promptDialog(question, value = "") {
  const dialog = $("#dlg-confirm");
  const input = $("#confirm-input");
  $("#confirm-text").textContent = question;
  input.hidden = value === null;
  input.value = value ?? "";
  openDialog(dialog);
  (value === null ? $("#confirm-ok") : input).focus();
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "ok" ? (value === null ? true : input.value) : null),
      { once: true },
    );
  });
}

const fmt = (ms) => (typeof ms === "number" ? ms.toFixed(1) : "");

/** The stage table of an answer or a search, as `ragstep ... --trace` prints it. */
export function showTrace(trace) {
  const rows = (trace || []).map((e) =>
    el(
      "tr",
      { "data-action": e.action },
      el("td", {}, e.stage),
      el("td", {}, e.action),
      el("td", { class: "num" }, fmt(e.duration_ms)),
      el("td", {}, Object.entries(e.counts || {}).map(([k, v]) => `${k}=${v}`).join(" ")),
      el("td", {}, e.reason || ""),
    ),
  );
  const total = (trace || []).reduce((sum, e) => sum + (e.duration_ms || 0), 0);
  const body = $("#trace-body");
  body.replaceChildren(
    el(
      "table",
      { class: "grid trace" },
      el(
        "thead",
        {},
        el("tr", {}, ...["stage", "action", "ms", "counts", "note"].map((k) => el("th", {}, t(`trace.${k}`)))),
      ),
      el("tbody", {}, rows),
    ),
    el("p", { class: "muted" }, t("trace.total", { ms: total.toFixed(1) })),
  );
  openDialog($("#dlg-trace"));
}

// -- the cited passage ---------------------------------------------------------------------------------------------

// The markers parsers leave in a passage (`<!-- page 3 -->` between a PDF's pages, `<!-- ocr page 3 -->` and
// `<!-- /ocr -->` around text read by OCR): a page number is worth showing, the rest is not.
const MARKER = /<!--\s*(?:\/ocr|ocr(?: page (\d+))?(?: image \S+)?|page (\d+))\s*-->/g;

/** A passage's text as a reader should see it: page markers as "[page 3]", other markers gone. */
export function readable(text) {
  return text.replace(MARKER, (_, ocrPage, page) => {
    const n = ocrPage || page;
    return n ? `[${t("cite.page", { n })}]` : "";
  });
}

// A sentence ends at 。！？!?；; a line end, or a full stop before a space; a dot inside a word (ASN.1, 4.19.0,
// libtasn1.h, e.g.) does not end it. Every character falls in some sentence: the pieces put together are the text.
const SENTENCE = /(?:[^。！？!?；;.\n]|\.(?!\s|$))*(?:(?:[。！？!?；;]|\.(?=\s|$)|\n)+|$)/g;

/** `text` cut into its sentences (none empty). */
function sentencesOf(text) {
  return (text.match(SENTENCE) || []).filter((s) => s);
}

/** Words of `text` for overlap: Latin words, and Han characters in pairs (no tokenizer in a page). */
function terms(text) {
  const out = new Set();
  const lower = text.toLowerCase();
  for (const word of lower.match(/[a-z0-9]+/g) || []) if (word.length > 1) out.add(word);
  const han = lower.match(/[\u3400-\u9fff]/g) || [];
  for (let i = 0; i + 1 < han.length; i++) out.add(han[i] + han[i + 1]);
  return out;
}

/** What the marker at `offset` cites: the answer's text since the previous marker (or the paragraph's start) up to
 * it. One sentence when each sentence carries its marker; several when one marker closes a run of them. */
export function citedSpan(answer, offset) {
  const before = answer.slice(0, offset).replace(/(?:\s|\[\d+\])+$/, "");
  let start = before.lastIndexOf("\n") + 1;
  for (const marker of before.matchAll(/\[\d+\]/g)) start = Math.max(start, marker.index + marker[0].length);
  return before.slice(start).trim();
}

function shared(want, text) {
  const have = terms(text);
  let count = 0;
  for (const term of want) if (have.has(term)) count++;
  return count;
}

/** The passage, split into sentences, with those the cited span quotes or paraphrases marked: for each sentence of
 * the span, the passage sentence sharing most of its terms (at least a third of them). Adjacent marks are joined. */
export function markedPassage(passage, span) {
  const sentences = sentencesOf(passage);
  const marked = new Set();
  for (const cited of sentencesOf(span)) {
    const want = terms(cited);
    if (!want.size) continue;
    let best = -1;
    let bestShared = 0;
    sentences.forEach((s, i) => {
      const count = shared(want, s);
      if (count > bestShared) [best, bestShared] = [i, count];
    });
    if (best >= 0 && bestShared * 3 >= want.size) marked.add(best);
  }
  const out = [];
  let run = null;
  sentences.forEach((s, i) => {
    if (!marked.has(i)) {
      run = null;
      out.push(document.createTextNode(s));
    } else if (run) run.append(s);
    else out.push((run = el("mark", {}, s)));
  });
  return out;
}

/** A picture the passage shows (its `image_info`), fetched with the key (an <img src> could not send it). */
function figure(info) {
  const img = el("img", { alt: info.caption || "", loading: "lazy" });
  const shown = el("figure", {}, img, info.caption ? el("figcaption", {}, info.caption) : null);
  request("GET", info.url)
    .then((response) => response.blob())
    .then((blob) => (img.src = URL.createObjectURL(blob)))
    .catch(() => shown.remove());
  return shown;
}

/** The dialog with passage `n`: its file, place, scores and text, what the answer cites from it marked. */
export function showPassage(n, ref, cited, kbName) {
  $("#passage-title").textContent = t("cite.title", { n });
  $("#passage-file").textContent = ref.knowledge_filename || ref.knowledge_title || ref.knowledge_id;
  $("#passage-meta").textContent = [
    t("cite.position", {
      chunk: (ref.chunk_index ?? 0) + 1,
      start: ref.start_at ?? 0,
      end: ref.end_at ?? 0,
      score: Number(ref.score || 0).toFixed(4),
      match: ref.match_type || "",
    }),
    t("cite.kb", { kb: kbName(ref.knowledge_base_id) }),
  ].join(" · ");
  $("#passage-text").replaceChildren(...markedPassage(readable(ref.content || ""), cited || ""));
  $("#passage-figures").replaceChildren(...(ref.image_info || []).map(figure));
  openDialog($("#dlg-passage"));
  $("#dlg-passage mark")?.scrollIntoView({ block: "center" });
}
