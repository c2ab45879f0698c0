/**
 * The Data files field's picker and upload: a list of the data files the server can read
 * (GET /api/datasets: the home's datasets folder, the demo data, TUNELAB_DATA_ROOTS) with
 * their rows and size, and an upload button that sends a file into the home's datasets
 * folder (POST /api/datasets/upload, the file as the body). Picking a file puts its path
 * in the field; the field still takes any path typed into it.
 */

import { api } from "./api.js";
import { formatBytes } from "./format.js";
import { notify } from "./notice.js";

const $ = (id) => document.getElementById(id);
const ACCEPT = ".jsonl,.json,.csv,.parquet";

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) if (value !== undefined && value !== null) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function describe(file) {
  const rows = file.rows == null ? "" : `${file.rows.toLocaleString()} row${file.rows === 1 ? "" : "s"}, `;
  return `${file.name} (${rows}${formatBytes(file.size_bytes)})${file.problem ? " — unreadable" : ""}`;
}

export class DataPicker {
  constructor() {
    this.files = [];
    this.limit = null;
  }

  /** Add the picker and upload controls under the Data files field, once. */
  mount() {
    const field = $("f-local_datasets");
    if (!field || $("data-picker")) return;
    const select = el("select", { id: "data-picker", "aria-describedby": "data-picker-note" });
    const upload = el("input", { id: "data-upload", type: "file", accept: ACCEPT, class: "visually-hidden" });
    const uploadButton = el("button", { type: "button", id: "data-upload-button", class: "quiet" }, "Upload a file…");
    const row = el("div", { class: "data-picker-row" });
    row.append(el("label", { for: "data-picker" }, "Pick a data file"), select, uploadButton,
      el("label", { for: "data-upload", class: "visually-hidden" }, "Upload a data file"), upload);
    const note = el("p", { class: "help", id: "data-picker-note", "aria-live": "polite" });
    field.closest(".field").append(row, note);
    select.addEventListener("change", () => this.#pick(select.value));
    uploadButton.addEventListener("click", () => upload.click());
    upload.addEventListener("change", () => {
      if (upload.files.length) this.#upload(upload.files[0]).finally(() => { upload.value = ""; });
    });
    this.refresh();
  }

  async refresh(selectPath) {
    const select = $("data-picker");
    if (!select) return;
    let answer;
    try {
      answer = await api.listDatasets();
    } catch {
      return;  // the field still takes typed paths; a 401 is asked about elsewhere
    }
    this.files = answer.files;
    this.limit = answer.upload_max_bytes;
    const options = [el("option", { value: "" }, this.files.length ? "Choose a file…" : "No data files yet")];
    for (const file of this.files) {
      const option = el("option", { value: file.path, title: file.problem || file.path }, describe(file));
      if (file.problem) option.disabled = true;
      options.push(option);
    }
    select.replaceChildren(...options);
    select.value = selectPath || "";
    $("data-picker-note").textContent =
      `Uploads go to ${answer.upload_folder} (at most ${formatBytes(this.limit)}; .jsonl, .json, .csv or .parquet).`;
  }

  #pick(path) {
    if (!path) return;
    const field = $("f-local_datasets");
    const lines = field.value.split("\n").map((s) => s.trim()).filter(Boolean);
    if (!lines.includes(path)) field.value = [...lines, path].join("\n");
    field.dispatchEvent(new Event("input", { bubbles: true }));
    const file = this.files.find((f) => f.path === path);
    if (file && file.columns.length) $("data-picker-note").textContent = `${file.name}: columns ${file.columns.join(", ")}. Check dataset shows its format.`;
  }

  async #upload(file) {
    const note = $("data-picker-note");
    if (this.limit != null && file.size > this.limit) {
      note.textContent = `${file.name} is ${formatBytes(file.size)}; this server accepts uploads up to ${formatBytes(this.limit)}.`;
      return;
    }
    note.textContent = `Uploading ${file.name}…`;
    try {
      const saved = await api.uploadDataset(file);
      await this.refresh(saved.path);
      this.#pick(saved.path);
      notify(`Uploaded ${saved.name}${saved.rows == null ? "" : ` (${saved.rows} rows)`}.`);
    } catch (err) {
      note.textContent = `Upload failed: ${err.message}`;
    }
  }
}
