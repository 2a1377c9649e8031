// Chat: knowledge bases and a pipeline to answer from, the answer streamed from WeKnora's event stream
// (POST /v1/knowledge-chat/{session}), clickable [n] citations, sources, the trace, and the session list.

import { ApiError, del, get, post, request, stream } from "./api.js";
import { t } from "./i18n.js";
import { $, citedSpan, confirmDialog, describe, el, readable, say, showPassage, showTrace } from "./ui.js";

// Where answers stream from: the API itself, or (on AWS, whose HTTP API buffers) the streaming chat function's URL.
const CHAT_BASE = document.querySelector('meta[name="ragstep-chat-url"]')?.content || "";

export function createChat(shared) {
  const state = { session: null, controller: null, pipelines: ["rag_stream"] };

  // -- the answer of one turn ------------------------------------------------------------------------------------

  function renderAnswer(node, text, refs) {
    // Text and [n] markers; a marker that names a passage becomes a button opening it.
    const parts = [];
    let last = 0;
    for (const match of text.matchAll(/\[(\d+)\]/g)) {
      const n = Number(match[1]);
      if (n < 1 || n > refs.length) continue;
      parts.push(text.slice(last, match.index));
      const offset = match.index;
      parts.push(
        el(
          "button",
          {
            type: "button",
            class: "cite",
            "aria-label": t("cite.title", { n }),
            onclick: () => showPassage(n, refs[n - 1], citedSpan(text, offset), shared.kbName),
          },
          `[${n}]`,
        ),
      );
      last = offset + match[0].length;
    }
    parts.push(text.slice(last));
    node.replaceChildren(...parts);
  }

  function renderSources(list, refs) {
    if (!refs.length) {
      list.replaceChildren(el("li", { class: "muted" }, t("chat.noSources")));
      return;
    }
    list.replaceChildren(
      ...refs.map((ref, i) =>
        el(
          "li",
          {},
          el(
            "button",
            { type: "button", class: "link", onclick: () => showPassage(i + 1, ref, "", shared.kbName) },
            `[${i + 1}] ${ref.knowledge_filename || ref.knowledge_title || ref.knowledge_id}`,
          ),
          el("span", { class: "muted" }, ` · ${shared.kbName(ref.knowledge_base_id)} · ${ref.match_type || ""}`),
          el("div", { class: "snippet" }, readable(ref.content || "").slice(0, 160)),
        ),
      ),
    );
  }

  /** What the reader should know about the answer: who answered, and the answer's notes (a stage the question
   *  needed that did not run, a follow-up searched with the previous question's words), in the server's words. */
  function noteFor(model, fallback, notes = []) {
    const lines = notes.map((note) => `(${t("chat.note", { note })})`);
    if (model === "extractive") lines.unshift(`(${t("chat.extractive")})`);
    else if (fallback) lines.unshift(`(${t("chat.fallback", { fallback })})`);
    return lines.join(" ");
  }

  /** The DOM of one turn; returns handles the stream fills in. */
  function turnView(query) {
    const answer = el("div", { class: "answer", "aria-live": "polite" });
    const note = el("p", { class: "note", hidden: true });
    const error = el("p", { class: "error", role: "alert", hidden: true });
    const sources = el("ol", { class: "sources" });
    const meta = el("span", { class: "muted meta" });
    // data-i18n: the labels follow a language switch (app.js translates the document).
    const copy = el("button", { type: "button", class: "small", disabled: true, "data-i18n": "chat.copy" }, t("chat.copy"));
    const trace = el("button", { type: "button", class: "small", hidden: true, "data-i18n": "chat.trace" }, t("chat.trace"));
    const summary = el("summary", { "data-i18n": "chat.sources" }, t("chat.sources"));
    const details = el("details", { class: "sources-box", hidden: true }, summary, sources);
    const node = el(
      "article",
      { class: "turn", "data-state": "streaming" },
      el("div", { class: "question" }, query),
      answer,
      note,
      error,
      details,
      el("div", { class: "actions" }, copy, trace, meta),
    );
    const view = { node, answer, note, error, sources, details, meta, copy, trace, text: "", refs: [] };
    copy.addEventListener("click", async () => {
      await copyText(view.text);
      copy.textContent = t("chat.copied");
      setTimeout(() => (copy.textContent = t("chat.copy")), 1500);
    });
    return view;
  }

  function finishView(view, { model, fallback, trace, interrupted, notes }, outcome = "done") {
    view.node.dataset.state = interrupted ? "stopped" : outcome;
    renderAnswer(view.answer, view.text + (interrupted ? ` ${t("chat.interrupted")}` : ""), view.refs);
    const note = noteFor(model, fallback, notes || []);
    view.note.textContent = note;
    view.note.hidden = !note;
    view.details.hidden = false;
    view.details.open = view.refs.length > 0;
    renderSources(view.sources, view.refs);
    view.copy.disabled = !view.text;
    if (trace) {
      view.trace.hidden = false;
      view.trace.onclick = () => showTrace(trace);
    }
  }

  // -- asking ----------------------------------------------------------------------------------------------------

  async function ask(query) {
    const kbs = shared.selectedKbs();
    const view = turnView(query);
    $("#messages").append(view.node);
    view.node.scrollIntoView({ block: "end" });
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    const started = performance.now();
    let firstToken = null;
    let pending = false;
    let complete = null;
    const paint = () => {
      pending = false;
      renderAnswer(view.answer, view.text, view.refs);
    };
    try {
      if (!state.session) {
        state.session = (await post("v1/sessions")).session_id;
        shared.onSessionsChanged();
      }
      const body = { query, knowledge_base_ids: kbs, pipeline: $("#pipeline").value };
      await stream(
        `${CHAT_BASE}v1/knowledge-chat/${encodeURIComponent(state.session)}`,
        body,
        ({ data }) => {
          if (!data || typeof data !== "object") return;
          if (data.response_type === "references") view.refs = data.knowledge_references || [];
          else if (data.response_type === "answer") {
            if (firstToken === null) {
              firstToken = performance.now() - started;
              view.node.dataset.ttft = firstToken.toFixed(1);
            }
            view.text += data.content;
            if (!pending) {
              pending = true;
              requestAnimationFrame(paint);
            }
          } else if (data.response_type === "complete") complete = data.data || {};
          else if (data.response_type === "error") throw new ApiError(502, data.data?.error || "error", data.content);
        },
        controller.signal,
      );
      if (!complete) throw new ApiError(502, "no_answer", t("chat.empty"));
      if (complete.interrupted) {
        finishView(view, { interrupted: true });
      } else {
        await storedAnswer(view, complete.request_id);
        finishView(view, complete);
        const total = performance.now() - started;
        view.node.dataset.total = total.toFixed(1);
        view.meta.textContent = t("chat.meta", {
          model: complete.model || "?",
          ttft: firstToken === null ? "–" : Math.round(firstToken),
          total: Math.round(total),
        });
      }
    } catch (err) {
      if (err.name === "AbortError") {
        finishView(view, { interrupted: true });
        say(t("chat.stopped"));
      } else if (err instanceof ApiError && err.needsKey) {
        view.node.remove();
        shared.askKey(err);
      } else {
        finishView(view, {}, "error");
        view.error.textContent = err instanceof ApiError && err.status === 502 ? t("chat.failed", { message: err.message }) : describe(err);
        view.error.hidden = false;
      }
    } finally {
      state.controller = null;
      setBusy(false);
      shared.onSessionsChanged();
    }
  }

  /** The saved turn's answer, when the server changed it after the stream (citations inserted afterwards). */
  async function storedAnswer(view, requestId) {
    if (!state.session || !requestId) return;
    try {
      const page = await get(`v1/sessions/${encodeURIComponent(state.session)}/messages?limit=1`);
      const turn = page.turns[0];
      if (turn && turn.request_id === requestId && turn.answer) {
        view.text = turn.answer;
        if (turn.references?.length) view.refs = turn.references;
      }
    } catch {
      /* the streamed text stands */
    }
  }

  function setBusy(busy) {
    $("#send").hidden = busy;
    $("#stop").hidden = !busy;
    $("#question").readOnly = busy;
  }

  function stop() {
    state.controller?.abort();
    if (state.session) {
      request("POST", `${CHAT_BASE}v1/sessions/${encodeURIComponent(state.session)}/stop`).catch(() => {});
    }
  }

  // -- sessions ----------------------------------------------------------------------------------------------------

  async function loadSessions() {
    const list = $("#sessions");
    try {
      const page = await get("v1/sessions?page_size=50");
      if (!page.sessions.length) {
        list.replaceChildren(el("li", { class: "muted" }, t("chat.noSessions")));
        return;
      }
      list.replaceChildren(
        ...page.sessions.map((s) =>
          el(
            "li",
            { class: s.session_id === state.session ? "current" : "", "data-session": s.session_id },
            el(
              "button",
              { type: "button", class: "session", onclick: () => openSession(s.session_id) },
              el("span", {}, s.first_query || s.session_id.slice(0, 8)),
              el("small", { class: "muted" }, s.turns === 1 ? t("chat.turn") : t("chat.turns", { n: s.turns })),
            ),
            el(
              "button",
              {
                type: "button",
                class: "icon",
                "aria-label": `${t("chat.delete")}: ${s.first_query || s.session_id.slice(0, 8)}`,
                title: t("chat.delete"),
                onclick: () => removeSession(s),
              },
              "×",
            ),
          ),
        ),
      );
    } catch (err) {
      if (err instanceof ApiError && err.needsKey) shared.askKey(err);
      else list.replaceChildren(el("li", { class: "error" }, describe(err)));
    }
  }

  async function openSession(id) {
    try {
      const page = await get(`v1/sessions/${encodeURIComponent(id)}/messages?limit=100`);
      state.session = id;
      const box = $("#messages");
      box.replaceChildren();
      for (const turn of [...page.turns].reverse()) {
        const view = turnView(turn.query);
        view.text = turn.answer;
        view.refs = turn.references || [];
        box.append(view.node);
        finishView(view, { model: turn.model, interrupted: turn.interrupted });
        view.meta.textContent = turn.model ? t("chat.metaStored", { model: turn.model }) : "";
      }
      loadSessions();
      $("#question").focus();
    } catch (err) {
      say(describe(err), "error");
    }
  }

  async function removeSession(s) {
    if (!(await confirmDialog(t("chat.deleteSession", { turns: s.turns })))) return;
    try {
      await del(`v1/sessions/${encodeURIComponent(s.session_id)}`);
      if (state.session === s.session_id) newChat();
      loadSessions();
    } catch (err) {
      say(describe(err), "error");
    }
  }

  function newChat() {
    state.session = null;
    $("#messages").replaceChildren(el("p", { class: "muted welcome" }, t("chat.welcome")));
    loadSessions();
    $("#question").focus();
  }

  async function loadPipelines() {
    try {
      const models = await get("v1/models");
      // The pipelines only: "ragstep" is rag_stream, "<profile>/<knowledge base>" ids are for OpenAI clients.
      const names = models.data.map((m) => m.id).filter((id) => id !== "ragstep" && !id.includes("/"));
      if (names.length) state.pipelines = names;
    } catch {
      /* the default pipeline stays */
    }
    const select = $("#pipeline");
    const keep = select.value || "rag_stream";
    select.replaceChildren(...state.pipelines.map((p) => el("option", { value: p }, p)));
    select.value = state.pipelines.includes(keep) ? keep : state.pipelines[0];
  }

  // -- wiring ------------------------------------------------------------------------------------------------------

  $("#ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = $("#question");
    const query = box.value.trim();
    if (!query || state.controller) return;
    box.value = "";
    $("#messages .welcome")?.remove();
    ask(query);
  });
  $("#question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("#ask").requestSubmit();
    }
  });
  $("#stop").addEventListener("click", stop);
  $("#new-chat").addEventListener("click", newChat);

  return {
    /** Ready to ask (the key known, the knowledge bases listed): the question box opens. */
    async start() {
      await loadPipelines();
      newChat();
      $("#question").disabled = $("#send").disabled = false;
      $("#question").focus();
    },
    refreshSessions: loadSessions,
    /** The words this view wrote itself, in the language just picked. */
    relabel() {
      loadSessions();
      const welcome = $("#messages .welcome");
      if (welcome) welcome.textContent = t("chat.welcome");
    },
  };
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = el("textarea", { class: "offscreen" }, text);
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
}
