// The console's start: who the key is (GET /v1/me), which views its scopes allow, the key dialog, the language
// switch, and the knowledge-base list both views share.

import { ApiError, apiKey, get, setApiKey } from "./api.js";
import { createChat } from "./chat.js";
import { language, setLanguage, t, translate } from "./i18n.js";
import { createKnowledge } from "./kb.js";
import { $, describe, el, openDialog, say } from "./ui.js";

const state = { me: null, kbs: [], picked: new Set() };

const shared = {
  scopes: () => state.me?.scopes || [],
  kbs: () => state.kbs,
  kbName: (id) => state.kbs.find((i) => i.knowledge_base.id === id)?.knowledge_base.name || id,
  selectedKbs: () =>
    shared.scopes().includes("search")
      ? state.kbs.filter((i) => state.picked.has(i.knowledge_base.id)).map((i) => i.knowledge_base.id)
      : $("#kb-names").value.split(/[,，\s]+/).filter(Boolean),
  reloadKbs,
  askKey,
  onSessionsChanged: () => chat.refreshSessions(),
};

const chat = createChat(shared);
const knowledge = createKnowledge(shared);

// -- the API key ---------------------------------------------------------------------------------------------------

function askKey(err) {
  const dialog = $("#dlg-key");
  const message = $("#key-error");
  const refused = err instanceof ApiError && apiKey();
  message.textContent = refused ? t("key.rejected", { message: err.message }) : "";
  message.hidden = !refused;
  setApiKey("");
  $("#key-input").value = "";
  openDialog(dialog);
  $("#key-input").focus();
}

$("#dlg-key").addEventListener("close", () => {
  const dialog = $("#dlg-key");
  if (dialog.returnValue !== "ok") {
    if (!state.me) say(t("key.needed"), "error");
    return;
  }
  const key = $("#key-input").value.trim();
  $("#key-input").value = "";
  if (!key) {
    askKey(new Error(t("key.none")));
    return;
  }
  setApiKey(key);
  boot();
});
$("#key-button").addEventListener("click", () => askKey(null));

// -- views ---------------------------------------------------------------------------------------------------------

function showView(name) {
  for (const view of ["chat", "kbs"]) {
    $(`#view-${view}`).hidden = view !== name;
    $(`#nav-${view}`).setAttribute("aria-current", view === name ? "page" : "false");
  }
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
}

async function reloadKbs() {
  if (!shared.scopes().includes("search")) return;
  try {
    const items = [];
    let cursor = "";
    do {
      const page = await get(`v1/knowledge-bases?limit=200${cursor}`);
      items.push(...page.items);
      cursor = page.next_cursor ? `&cursor=${encodeURIComponent(page.next_cursor)}` : "";
    } while (cursor);
    state.kbs = items;
    const ids = new Set(items.map((i) => i.knowledge_base.id));
    state.picked = new Set([...state.picked].filter((id) => ids.has(id)));
    if (!state.picked.size && items.length) state.picked.add(items[0].knowledge_base.id);
    renderPicker();
    knowledge.render();
  } catch (err) {
    if (err instanceof ApiError && err.needsKey) askKey(err);
    else say(describe(err), "error");
  }
}

function renderPicker() {
  const box = $("#kb-picker");
  if (!shared.scopes().includes("search")) {
    box.replaceChildren(el("input", { id: "kb-names", type: "text", placeholder: t("chat.kbNames"), "aria-label": t("chat.kbs") }));
    return;
  }
  if (!state.kbs.length) {
    box.replaceChildren(el("span", { class: "muted" }, t("chat.noKbs")));
    return;
  }
  box.replaceChildren(
    ...state.kbs.map((info) => {
      const kb = info.knowledge_base;
      return el(
        "label",
        { class: "chip" },
        el("input", {
          type: "checkbox",
          value: kb.id,
          checked: state.picked.has(kb.id),
          onchange: (e) => (e.target.checked ? state.picked.add(kb.id) : state.picked.delete(kb.id)),
        }),
        kb.name,
      );
    }),
  );
}

function describeMe(me) {
  $("#whoami").textContent = me.keyless
    ? t("me.keyless")
    : t("me.key", { prefix: me.key_prefix, scopes: me.scopes.join(", ") });
  $("#key-button").textContent = me.keyless ? t("key.button") : t("key.forget");
  $("#key-button").hidden = me.keyless;
}

async function boot() {
  say("");
  state.me = null;
  try {
    state.me = await get("v1/me");
  } catch (err) {
    if (err instanceof ApiError && err.needsKey) askKey(err);
    else say(describe(err), "error");
    return;
  }
  describeMe(state.me);
  const scopes = state.me.scopes;
  $("#nav-chat").hidden = !scopes.includes("chat");
  $("#nav-kbs").hidden = !scopes.includes("search");
  const wanted = location.hash.slice(1);
  const views = ["chat", "kbs"].filter((v) => !$(`#nav-${v}`).hidden);
  showView(views.includes(wanted) ? wanted : views[0] || "chat");
  await reloadKbs();
  renderPicker();
  if (scopes.includes("chat")) chat.start();
}

$("#nav-chat").addEventListener("click", () => showView("chat"));
$("#nav-kbs").addEventListener("click", () => {
  knowledge.back();
  showView("kbs");
});
$("#lang").addEventListener("click", () => {
  setLanguage(language() === "zh" ? "en" : "zh");
  translate();
  if (state.me) {
    describeMe(state.me);
    renderPicker();
    knowledge.render();
    if (shared.scopes().includes("chat")) chat.relabel();
  }
});
setLanguage(language());
translate();
boot();
