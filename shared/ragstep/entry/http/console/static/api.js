// The public HTTP API, as any client calls it: relative URLs (the page is served by the API it talks to), the API
// key from this tab's sessionStorage as `Authorization: Bearer`, and `{error, message}` error bodies. API Gateway's
// own refusals on AWS (`{message}` only: 401 without a key, 403 for a key its authorizer refused) are read too.

const KEY = "ragstep.key";

export const apiKey = () => sessionStorage.getItem(KEY) || "";
export const setApiKey = (key) => (key ? sessionStorage.setItem(KEY, key) : sessionStorage.removeItem(KEY));

export class ApiError extends Error {
  constructor(status, code, message, retryAfter = "") {
    super(message);
    this.status = status; // 0: the server could not be reached
    this.code = code;
    this.retryAfter = retryAfter;
  }
  /** The key is missing or refused: ask for one. */
  get needsKey() {
    return this.status === 401 || (this.status === 403 && this.code === "gateway_forbidden");
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function failure(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    /* not JSON: a proxy's page */
  }
  const code = body.error || (response.status === 403 ? "gateway_forbidden" : `http_${response.status}`);
  const message = body.message || response.statusText || `HTTP ${response.status}`;
  return new ApiError(response.status, code, message, response.headers.get("Retry-After") || "");
}

/** fetch(path) with the key; throws ApiError on a network failure or a status >= 400. */
export async function request(method, path, { json, form, signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network", err.message || String(err));
  }
  if (!response.ok) throw await failure(response);
  return response;
}

export const get = async (path) => (await request("GET", path)).json();
export const post = async (path, json) => (await request("POST", path, { json })).json();
export const patch = async (path, json) => (await request("PATCH", path, { json })).json();
export const del = async (path) => (await request("DELETE", path)).json();

/** POST `json` to an event-stream route; calls onFrame({event, data}) for each frame as it arrives. */
export async function stream(path, json, onFrame, signal) {
  const response = await request("POST", path, { json, signal });
  const type = response.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream")) {
    // A proxy that buffers (API Gateway on AWS) still sends the frames, in one piece.
    parseFrames(await response.text(), onFrame);
    return;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    const end = buffer.lastIndexOf("\n\n");
    if (end >= 0) {
      parseFrames(buffer.slice(0, end + 2), onFrame);
      buffer = buffer.slice(end + 2);
    }
  }
  if (buffer.trim()) parseFrames(`${buffer}\n\n`, onFrame);
}

function parseFrames(text, onFrame) {
  for (const block of text.replace(/\r\n?/g, "\n").split("\n\n")) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) continue;
    const raw = data.join("\n");
    let parsed;
    try {
      parsed = JSON.parse(raw);
    } catch {
      parsed = raw;
    }
    onFrame({ event, data: parsed });
  }
}
