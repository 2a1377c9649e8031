// Knowledge bases: the list with counts, create and delete; one base's documents (status, chunks, tag, enabled),
// uploads of several files with each file's ingestion job followed to its end, and a search with its trace.

import { ApiError, del, get, patch, post, request } from "./api.js";
import { t } from "./i18n.js";
import { $, confirmDialog, describe, el, promptDialog, say, showTrace } from "./ui.js";

const DONE = new Set(["indexed", "updated", "unchanged", "duplicate", "failed", "cancelled"]);
const POLL_MS = 400;

const size = (bytes) =>
  bytes >= 1048576 ? `${(bytes / 1048576).toFixed(1)} MB` : bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KB` : `${bytes} B`;

export function createKnowledge(shared) {
  let current = null; // the open knowledge base's id
  let listing = 0; // the latest documents request: an older answer arriving later is not shown
  const can = (scope) => shared.scopes().includes(scope);

  function fail(err) {
    if (err instanceof ApiError && err.needsKey) shared.askKey(err);
    else say(describe(err), "error");
  }

  // -- the list ----------------------------------------------------------------------------------------------------

  function renderList() {
    const rows = shared.kbs().map((info) => {
      const kb = info.knowledge_base;
      return el(
        "tr",
        { "data-kb": kb.name },
        el("td", {}, el("button", { type: "button", class: "link", onclick: () => open(kb.id) }, kb.name)),
        el("td", {}, kb.type),
        el("td", {}, kb.embedding_model),
        el("td", { class: "num" }, String(info.documents)),
        el("td", { class: "num" }, String(info.chunks)),
        el("td", { class: "num" }, size(info.size)),
        el("td", { class: "num" }, String(info.pending_jobs)),
        el(
          "td",
          {},
          can("ingest") &&
            el("button", { type: "button", class: "small danger", onclick: () => removeKb(info) }, t("kb.delete")),
        ),
      );
    });
    $("#kb-rows").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 8, class: "muted" }, t("kb.none")))]));
    $("#kb-create").hidden = !can("ingest");
  }

  async function create(event) {
    event.preventDefault();
    const form = event.target;
    const body = {
      name: form.elements.name.value.trim(),
      type: form.elements.type.value,
      embedding_model: form.elements.embedding.value.trim() || null,
      description: form.elements.description.value.trim(),
      graph: form.elements.graph.checked,
      layers: form.elements.layers.checked,
    };
    try {
      const info = await post("v1/knowledge-bases", body);
      form.reset();
      say(t("kb.created", { name: info.knowledge_base.name }));
      await shared.reloadKbs();
    } catch (err) {
      fail(err);
    }
  }

  async function removeKb(info) {
    const kb = info.knowledge_base;
    const question = t("kb.deleteConfirm", { name: kb.name, docs: info.documents, chunks: info.chunks });
    if (!(await confirmDialog(question))) return;
    try {
      await del(`v1/knowledge-bases/${encodeURIComponent(kb.id)}`);
      say(t("kb.deleted", { name: kb.name }));
      if (current === kb.id) back();
      await shared.reloadKbs();
    } catch (err) {
      fail(err);
    }
  }

  // -- one knowledge base ------------------------------------------------------------------------------------------

  function open(id) {
    current = id;
    const info = shared.kbs().find((i) => i.knowledge_base.id === id);
    $("#kb-title").textContent = info ? info.knowledge_base.name : id;
    $("#kb-list-view").hidden = true;
    $("#kb-detail").hidden = false;
    $("#upload").hidden = !can("ingest");
    $("#uploads").replaceChildren();
    $("#search-results").replaceChildren();
    $("#search-trace").hidden = true;
    loadDocuments();
    $("#kb-title").focus();
  }

  function back() {
    current = null;
    $("#kb-detail").hidden = true;
    $("#kb-list-view").hidden = false;
  }

  async function loadDocuments() {
    const kb = current;
    if (!kb) return; // the user went back to the list meanwhile
    const mine = ++listing;
    try {
      const docs = [];
      let cursor = "";
      do {
        const page = await get(`v1/knowledge-bases/${encodeURIComponent(kb)}/documents?limit=200${cursor}`);
        docs.push(...page.items);
        cursor = page.next_cursor ? `&cursor=${encodeURIComponent(page.next_cursor)}` : "";
      } while (cursor);
      if (kb === current && mine === listing) renderDocuments(docs);
    } catch (err) {
      fail(err);
    }
  }

  function renderDocuments(docs) {
    const ingest = can("ingest");
    const rows = docs.map((d) =>
      el(
        "tr",
        { "data-doc": d.file, "data-status": d.status },
        el("td", {}, d.file, d.error && el("div", { class: "error small-text" }, d.error)),
        el("td", {}, el("span", { class: `badge ${d.status}` }, d.status)),
        el("td", { class: "num" }, String(d.chunks)),
        el("td", {}, d.tag),
        el(
          "td",
          {},
          el("input", {
            type: "checkbox",
            checked: d.enabled,
            disabled: !ingest,
            "aria-label": `${t("doc.enabled")}: ${d.file}`,
            onchange: (e) => setEnabled(d, e.target.checked),
          }),
        ),
        el(
          "td",
          { class: "row-actions" },
          ingest && el("button", { type: "button", class: "small", onclick: () => retag(d) }, t("doc.retag")),
          ingest && el("button", { type: "button", class: "small danger", onclick: () => removeDoc(d) }, t("doc.delete")),
        ),
      ),
    );
    $("#doc-rows").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 6, class: "muted" }, t("doc.none")))]));
  }

  async function setEnabled(doc, enabled) {
    listing++; // a listing under way would show the old state
    try {
      await patch(`v1/documents/${encodeURIComponent(doc.id)}`, { enabled });
    } catch (err) {
      fail(err);
    }
    loadDocuments();
  }

  async function retag(doc) {
    const tag = await promptDialog(t("doc.retagPrompt", { file: doc.file }), doc.tag);
    if (tag === null) return;
    try {
      const updated = await patch(`v1/documents/${encodeURIComponent(doc.id)}`, { tag });
      loadDocuments();
      if (updated.job) follow([[updated.job, uploadRow(doc.file)]]);
    } catch (err) {
      fail(err);
    }
  }

  async function removeDoc(doc) {
    if (!(await confirmDialog(t("doc.deleteConfirm", { file: doc.file, chunks: doc.chunks })))) return;
    try {
      await del(`v1/documents/${encodeURIComponent(doc.id)}`);
      loadDocuments();
      shared.reloadKbs();
    } catch (err) {
      fail(err);
    }
  }

  // -- uploads -----------------------------------------------------------------------------------------------------

  function uploadRow(name) {
    const status = el("span", { class: "badge running" }, t("upload.uploading"));
    const error = el("div", { class: "error small-text", hidden: true });
    const row = el("li", { "data-file": name }, el("span", {}, name), " ", status, error);
    $("#uploads").append(row);
    return { row, status, error };
  }

  function show(handle, status, message = "") {
    handle.row.dataset.status = status;
    handle.status.className = `badge ${status}`;
    handle.status.textContent = status;
    handle.error.textContent = message;
    handle.error.hidden = !message;
  }

  // One request per file: the API refuses a whole request for one bad file, and a person dropping a folder expects
  // each file to be ingested or refused on its own, with its own reason (as `ragstep ingest` reports them).
  async function upload(files) {
    if (!files.length || !current) return;
    const kb = current;
    const handles = [...files].map((f) => uploadRow(f.name));
    const tag = $("#upload-tag").value.trim();
    const started = [];
    for (const [i, file] of [...files].entries()) {
      const form = new FormData();
      form.append("files", file, file.name);
      if (tag) form.append("tag", tag);
      try {
        const response = await request("POST", `v1/knowledge-bases/${encodeURIComponent(kb)}/documents`, { form });
        const [job] = (await response.json()).jobs;
        show(handles[i], job.status);
        started.push([job, handles[i]]);
      } catch (err) {
        if (err instanceof ApiError && err.needsKey) {
          for (const h of handles.slice(i)) show(h, "failed", describe(err));
          shared.askKey(err);
          break;
        }
        show(handles[i], "failed", describe(err));
      }
    }
    if (started.length) await follow(started);
  }

  /** Each job polled until it ends; the documents and counts are refreshed as they do. */
  async function follow(pairs) {
    await Promise.all(
      pairs.map(async ([job, handle]) => {
        let now = job;
        while (!DONE.has(now.status)) {
          await new Promise((r) => setTimeout(r, POLL_MS));
          try {
            now = await get(`v1/ingestion-jobs/${encodeURIComponent(job.id)}`);
          } catch (err) {
            show(handle, "failed", describe(err));
            return;
          }
          show(handle, now.status, now.error);
        }
        show(handle, now.status, now.error);
        loadDocuments();
      }),
    );
    loadDocuments();
    shared.reloadKbs();
  }

  // -- search ------------------------------------------------------------------------------------------------------

  async function search(event) {
    event.preventDefault();
    const query = $("#search-query").value.trim();
    if (!query) return;
    try {
      const found = await post("v1/knowledge-search", { query, knowledge_base_ids: [current] });
      const rows = found.results.map((r, i) =>
        el(
          "tr",
          {},
          el("td", { class: "num" }, String(i + 1)),
          el("td", { class: "num" }, Number(r.score).toFixed(4)),
          el("td", {}, r.match_type),
          el("td", {}, r.knowledge_filename || r.knowledge_id),
          el("td", { class: "content" }, r.content),
        ),
      );
      $("#search-results").replaceChildren(
        ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 5, class: "muted" }, t("search.none")))]),
      );
      const trace = $("#search-trace");
      trace.hidden = false;
      trace.onclick = () => showTrace(found.trace);
    } catch (err) {
      fail(err);
    }
  }

  // -- wiring ------------------------------------------------------------------------------------------------------

  $("#kb-create").addEventListener("submit", create);
  $("#kb-back").addEventListener("click", back);
  $("#search-form").addEventListener("submit", search);
  const drop = $("#drop");
  const picker = $("#file-input");
  picker.addEventListener("change", () => {
    upload(picker.files);
    picker.value = "";
  });
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    upload(e.dataTransfer.files);
  });
  drop.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      picker.click();
    }
  });

  return { render: renderList, open, back };
}
