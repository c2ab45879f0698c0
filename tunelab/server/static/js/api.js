/**
 * Talking to the tunelab server: the API token and every HTTP call the page makes.
 *
 * The token comes from the URL fragment `#token=...` (what `tunelab serve` prints; a
 * fragment never reaches server logs) or from the person, once; it is kept in
 * localStorage. Every failed call becomes an ApiError carrying the server's
 * `{"error": {code, message, field, fields}}` body, so callers can show a message next
 * to the field it names.
 */

const TOKEN_KEY = "tunelab.token";

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `request failed with HTTP ${status}`);
    this.status = status;
    this.code = err.code || `http_${status}`;
    this.field = err.field || null;
    // Per-field errors of a 422; a single `field` is folded in so callers see one list.
    this.fields = Array.isArray(err.fields) && err.fields.length
      ? err.fields
      : (err.field ? [{ field: err.field, message: err.message }] : []);
  }
}

/** Listeners told when the server rejects the token (so the page can ask again). */
const unauthorizedListeners = new Set();

export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

/** Take a token from `#token=...` if present (and drop it from the address bar). */
export function adoptTokenFromUrl() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const token = params.get("token");
  if (!token) return false;
  setToken(token);
  params.delete("token");
  const rest = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  return true;
}

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  localStorage.setItem(TOKEN_KEY, token.trim());
}

export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
}

/** A JSON request with the bearer token; resolves to the parsed body or throws ApiError. */
export async function request(method, path, body) {
  const headers = { Authorization: `Bearer ${getToken()}` };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (cause) {
    const err = new ApiError(0, { error: { code: "network", message: "cannot reach the tunelab server; is `tunelab serve` still running?" } });
    err.cause = cause;
    throw err;
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const err = new ApiError(response.status, data);
    if (response.status === 401) unauthorizedListeners.forEach((fn) => fn(err));
    throw err;
  }
  return data;
}

/** A random id for idempotent starts; works where crypto.randomUUID does not (plain http on a LAN address). */
export function newRequestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export const api = {
  me: () => request("GET", "/api/me"),
  status: () => request("GET", "/api/train/status"),
  runStatus: (id) => request("GET", `/api/runs/${encodeURIComponent(id)}/status`),
  metrics: () => request("GET", "/api/train/metrics"),
  start: (config, startRequestId) => request("POST", "/api/train/start", { ...config, start_request_id: startRequestId }),
  stopRun: (id, save) => request("POST", `/api/runs/${encodeURIComponent(id)}/stop`, { save }),
  checkConfig: (config) => request("POST", "/api/train/check", config),
  reset: () => request("POST", "/api/train/reset"),
  previewDataset: (source) => request("POST", "/api/datasets/preview", source),
  estimateMemory: (config) => request("POST", "/api/memory/estimate", config),
  listRuns: (limit, offset) => request("GET", `/api/runs?limit=${limit}&offset=${offset}`),
  getRun: (id) => request("GET", `/api/runs/${encodeURIComponent(id)}`),
  renameRun: (id, displayName) => request("PATCH", `/api/runs/${encodeURIComponent(id)}`, { display_name: displayName }),
  deleteRun: (id, deleteArtifacts) => request("DELETE", `/api/runs/${encodeURIComponent(id)}?delete_artifacts=${deleteArtifacts}`),
  resumeRun: (id) => request("POST", `/api/runs/${encodeURIComponent(id)}/resume`),
  listSamples: (id) => request("GET", `/api/runs/${encodeURIComponent(id)}/samples`),
  /** A spoken sample's audio, fetched with the token (an <audio src> could not send it). */
  sampleBlob: async (id, name) => {
    const response = await fetch(`/api/runs/${encodeURIComponent(id)}/samples/${encodeURIComponent(name)}`,
      { headers: { Authorization: `Bearer ${getToken()}` } });
    if (!response.ok) throw new ApiError(response.status, null);
    return response.blob();
  },
  /** Every spoken sample of a run, as one zip blob. */
  samplesZipBlob: async (id) => {
    const response = await fetch(`/api/runs/${encodeURIComponent(id)}/samples.zip`, { headers: { Authorization: `Bearer ${getToken()}` } });
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
    return response.blob();
  },
  /**
   * A text-to-speech run's speech of `text`, as a wav blob, streamed: `onProgress` hears each
   * progress line ({message, tokens, max_tokens, elapsed_s}); aborting `signal` closes the
   * connection, which ends the speaking on the server. An ApiError carries the server's reason.
   */
  speak: async (id, text, { signal, onProgress = () => {} } = {}) => {
    const response = await fetch(`/api/runs/${encodeURIComponent(id)}/speak?stream=true`, {
      method: "POST", body: JSON.stringify({ text }), signal,
      headers: { Authorization: `Bearer ${getToken()}`, "Content-Type": "application/json" },
    });
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += value;
      const lines = pending.split("\n");
      pending = lines.pop();
      for (const line of lines.filter(Boolean)) {
        const item = JSON.parse(line);
        if (item.type === "progress") onProgress(item);
        else if (item.type === "error") throw new ApiError(item.status, { error: item.error });
        else if (item.type === "done") {
          const bytes = Uint8Array.from(atob(item.audio_base64), (c) => c.charCodeAt(0));
          return new Blob([bytes], { type: item.media_type });
        }
      }
    }
    throw new ApiError(0, { error: { code: "network", message: "the connection ended before the speech was made; try again" } });
  },
  chatTarget: (id, checkpoint) => request("GET", `/api/runs/${encodeURIComponent(id)}/chat${checkpoint == null ? "" : `?checkpoint=${checkpoint}`}`),
  exportRun: (id, body) => request("POST", `/api/runs/${encodeURIComponent(id)}/export`, body),
  listExports: (id) => request("GET", `/api/runs/${encodeURIComponent(id)}/exports`),
  /** The token goes in the body, never in the URL. */
  pushRun: (id, body) => request("POST", `/api/runs/${encodeURIComponent(id)}/push`, body),
  /** One export file (or, without `file`, the whole folder as a zip) as a blob, fetched with the token. */
  exportBlob: async (id, folder, file) => {
    const query = new URLSearchParams({ folder, ...(file ? { file } : {}) });
    const response = await fetch(`/api/runs/${encodeURIComponent(id)}/exports/download?${query}`,
      { headers: { Authorization: `Bearer ${getToken()}` } });
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
    return response.blob();
  },
  listDatasets: () => request("GET", "/api/datasets"),
  /** Upload a data file: the File itself is the body, streamed to the server's datasets folder. */
  uploadDataset: async (file) => {
    const response = await fetch(`/api/datasets/upload?name=${encodeURIComponent(file.name)}`, {
      method: "POST", body: file,
      headers: { Authorization: `Bearer ${getToken()}`, "Content-Type": "application/octet-stream" },
    });
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  },
  listSweeps: () => request("GET", "/api/sweeps"),
  startSweep: (body) => request("POST", "/api/sweeps", body),
  stopSweep: (id) => request("POST", `/api/sweeps/${encodeURIComponent(id)}/stop`),
  localModels: () => request("GET", "/api/models/local"),
  families: () => request("GET", "/api/models/families"),
  /** The server's OpenAPI document (public): the export options are read from it. */
  openapi: () => request("GET", "/openapi.json"),
  /**
   * A single-use ticket that opens one progress stream: EventSource cannot send headers,
   * and the token itself never goes in a URL. `{ticket, expires_in, url}`.
   */
  streamTicket: (runId) => request("POST", "/api/stream-tickets", { run_id: runId }),
};
