/**
 * The Export dialog for one run. Its options are not written into the page: they are
 * read from the server's own description of the export request (the `ExportRequest`
 * schema in /openapi.json), so a format or setting the server gains appears here
 * without a page change. A choice list becomes a select, anything else a text box.
 * Below them, every export the run has is listed with a download button for each file
 * and one for the whole folder as a zip (its owner's or an admin's, as exporting is),
 * and the push to the Hugging Face Hub (push-form.js).
 */

import { api } from "./api.js";
import { runName } from "./history.js";
import { formatBytes } from "./format.js";
import { notify } from "./notice.js";
import { PushForm } from "./push-form.js";
import { cannotManage, guard } from "./rights.js";

const $ = (id) => document.getElementById(id);
const SCHEMA = "ExportRequest";

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) if (value !== undefined && value !== null) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A schema with its `$ref` (or single-entry allOf, as older pydantic writes) looked up in `schemas`. */
function resolve(schema, schemas) {
  let found = schema;
  if (found.allOf && found.allOf.length === 1) found = { ...found, ...found.allOf[0] };
  if (found.$ref) found = { ...(schemas[found.$ref.split("/").pop()] || {}), ...found };
  return found;
}

/** The choices a schema property allows (its enum, or the enums of its anyOf), and whether it may be null. */
function choicesOf(prop, schemas) {
  const variants = (prop.anyOf || [prop]).map((v) => resolve(v, schemas));
  const choices = variants.flatMap((v) => v.enum || (v.const !== undefined ? [v.const] : []));
  const nullable = variants.some((v) => v.type === "null");
  return { choices, nullable };
}

const fieldId = (name) => `export-${name}`;

export class ExportDialog {
  constructor() {
    this.run = null;
    this.schema = null;
    this.schemas = {};
    this.busy = false;
    this.push = new PushForm((run) => { if (this.run === run) this.#showDownloads(run); });
    $("export-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#submit();
    });
    $("export-close").addEventListener("click", () => $("export-dialog").close());
    $("export-dialog").addEventListener("cancel", (event) => {
      if (this.busy || this.push.busy) event.preventDefault();  // the work goes on either way; keep its answer in view
    });
  }

  async open(run) {
    this.run = run;
    try {
      this.schema = this.schema || await this.#loadSchema();
    } catch (err) {
      notify(`Cannot show the export options: ${err.message}`, "error");
      return;
    }
    $("export-title").textContent = `Export ${runName(run)}`;
    $("export-fields").replaceChildren(...this.#fields());
    $("export-result").replaceChildren();
    $("export-error").textContent = "";
    $("export-downloads-list").replaceChildren();
    this.push.open(run);
    $("export-dialog").showModal();
    this.#showDownloads(run);
  }

  /** The run's exports, each file with a download button, and the folder as a zip. */
  async #showDownloads(run) {
    let answer;
    try {
      answer = await api.listExports(run.id);
    } catch (err) {
      $("export-downloads-list").replaceChildren(el("p", { class: "field-error" }, `Cannot list the exports: ${err.message}`));
      return;
    }
    if (this.run !== run) return;
    const why = cannotManage(run);
    const blocks = answer.exports.map((exp) => {
      const files = el("ul", { class: "export-download-files" });
      for (const file of exp.files) {
        const button = el("button", { type: "button", class: "quiet download", "data-file": file.path }, `Download ${file.path}`);
        button.addEventListener("click", () => this.#download(run, exp.folder, file.path, file.path.split("/").pop()));
        const item = el("li", {}, "");
        item.append(guard(button, why), el("span", { class: "help" }, ` ${formatBytes(file.size_bytes)}`));
        files.append(item);
      }
      const all = el("button", { type: "button", class: "quiet download", "data-folder": exp.folder }, "Download all (.zip)");
      all.addEventListener("click", () => this.#download(run, exp.folder, null, `run-${run.id}-${exp.folder.split("/").pop()}.zip`));
      const block = el("div", { class: "export-download", "data-format": exp.format });
      block.append(el("p", {}, `${exp.format} · ${exp.folder}`), guard(all, why), files);
      return block;
    });
    $("export-downloads-list").replaceChildren(...(blocks.length ? blocks : [el("p", { class: "help" }, "No exports yet.")]));
  }

  /** Fetch with the token (a plain link could not send it) and hand the browser the file. */
  async #download(run, folder, file, name) {
    try {
      const blob = await api.exportBlob(run.id, folder, file);
      const link = el("a", { href: URL.createObjectURL(blob), download: name });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    } catch (err) {
      notify(`Cannot download ${name}: ${err.message}`, "error");
    }
  }

  async #loadSchema() {
    const doc = await api.openapi();
    this.schemas = (doc && doc.components && doc.components.schemas) || {};
    const schema = this.schemas[SCHEMA];
    if (!schema || !schema.properties) throw new Error(`the server describes no ${SCHEMA}`);
    return schema;
  }

  #fields() {
    return Object.entries(this.schema.properties).map(([name, raw]) => {
      const prop = resolve(raw, this.schemas);
      const id = fieldId(name);
      const label = raw.title || name;  // a referenced enum's own title is its class name
      const { choices, nullable } = choicesOf(prop, this.schemas);
      let control;
      if (choices.length) {
        control = el("select", { id, name });
        if (nullable || prop.default === undefined || prop.default === null) control.append(el("option", { value: "" }, "default"));
        for (const choice of choices) control.append(el("option", { value: String(choice) }, String(choice)));
        if (prop.default !== undefined && prop.default !== null) control.value = String(prop.default);
      } else if ((prop.anyOf || [prop]).some((v) => v.type === "boolean")) {
        control = el("input", { id, name, type: "checkbox" });
        control.checked = prop.default === true;
      } else {
        control = el("input", { id, name, type: "text", autocomplete: "off", spellcheck: "false", placeholder: "default" });
      }
      control.setAttribute("aria-describedby", `${id}-help`);
      const block = el("div", { class: "field", "data-field": name });
      block.append(el("label", { for: id }, label), control);
      if (prop.description) block.append(el("p", { class: "help", id: `${id}-help` }, prop.description));
      return block;
    });
  }

  #body() {
    const body = {};
    for (const name of Object.keys(this.schema.properties)) {
      const control = $(fieldId(name));
      if (control.type === "checkbox") body[name] = control.checked;
      else if (control.value.trim() !== "") body[name] = control.value.trim();
    }
    return body;
  }

  async #submit() {
    if (this.busy) return;
    const run = this.run;
    this.busy = true;
    $("export-start").disabled = true;
    $("export-error").textContent = "";
    $("export-result").replaceChildren(el("p", { class: "help" }, "Exporting… a merge or GGUF file can take minutes."));
    try {
      const answer = await api.exportRun(run.id, this.#body());
      const files = el("ul", { class: "export-files" });
      for (const file of answer.files) files.append(el("li", {}, file));
      $("export-result").replaceChildren(
        el("p", { class: "export-done" }, `Exported ${answer.format}${answer.quant || answer.dtype ? ` (${answer.quant || answer.dtype})` : ""} to ${answer.dest}`),
        files);
      notify(`Exported ${runName(run)} as ${answer.format}.`);
      this.#showDownloads(run);
    } catch (err) {
      $("export-result").replaceChildren();
      $("export-error").textContent = err.field ? `${err.field}: ${err.message}` : err.message;
    } finally {
      this.busy = false;
      $("export-start").disabled = false;
    }
  }
}
