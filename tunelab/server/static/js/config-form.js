/**
 * The run configuration form: drawn from the field table (config-fields.js: the server's
 * own schema of a run), read into a RunConfig body,
 * filled from a loaded config, and annotated with per-field errors (a 422 from the
 * server, or input the page itself cannot turn into a value), every one at once, each
 * beside its field in words that name it. Past the essentials the form is folded into
 * sections (<details>) that open by themselves when a field inside has an error.
 */

import { loadFieldTable } from "./config-fields.js";
import { ADAPTER_METHODS, DATA_SOURCES, METHOD_FIELDS, METHOD_SETTINGS, METHODS } from "./config-pickers.js";
import { notify } from "./notice.js";

const NO_FIELDS = { basic: [], advanced: [], all: [] };

const idFor = (name) => `f-${name.replace(/\./g, "-")}`;

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

/** The label + control + help + error slot of one field. */
function fieldBlock(spec) {
  const id = idFor(spec.name);
  const describedBy = [spec.help ? `${id}-help` : null, `${id}-error`].filter(Boolean).join(" ");
  let control;
  if (spec.kind === "select" || spec.kind === "tristate") {
    const options = spec.kind === "tristate"
      ? [["", "auto"], ["true", "on"], ["false", "off"]]
      : spec.options.map((o) => (Array.isArray(o) ? o : [o, o]));
    control = el("select", { id, name: spec.name }, options.map(([value, text]) => el("option", { value, text })));
  } else if (spec.kind === "list" || spec.kind === "map" || spec.kind === "jsonlist") {
    control = el("textarea", { id, name: spec.name, rows: 2, placeholder: spec.placeholder, spellcheck: "false" });
  } else if (spec.kind === "bool") {
    control = el("input", { id, name: spec.name, type: "checkbox" });
  } else {
    const numeric = spec.kind === "int" || spec.kind === "float" || spec.kind === "intlist";
    control = el("input", {
      id, name: spec.name, type: spec.kind === "secret" ? "password" : "text",
      inputmode: spec.kind === "int" || spec.kind === "intlist" ? "numeric" : spec.kind === "float" ? "decimal" : undefined,
      autocomplete: spec.kind === "secret" ? "new-password" : "off",
      placeholder: spec.placeholder, required: spec.required, spellcheck: numeric ? undefined : "false",
    });
  }
  control.setAttribute("aria-describedby", describedBy);
  const label = el("label", { for: id, text: spec.label });
  const wide = spec.wide || spec.kind === "list" || spec.kind === "map" || spec.kind === "jsonlist" ? " field-wide" : "";
  const className = spec.kind === "bool" ? "field field-check field-wide" : `field${wide}`;
  const block = el("div", { class: className, "data-field": spec.name }, spec.kind === "bool" ? [control, label] : [label, control]);
  if (spec.help) block.append(el("p", { class: "help", id: `${id}-help`, text: spec.help }));
  block.append(el("p", { class: "field-error", id: `${id}-error`, role: "alert" }));
  if (spec.source) block.dataset.source = spec.source;
  if (spec.adapterOnly) block.dataset.adapterOnly = "true";
  return block;
}

function methodBlock() {
  const options = METHODS.map((m) => [m.value, m.label]);
  return fieldBlock({ name: "method", label: "Method", kind: "select", options, help: METHODS[0].help });
}

function sourceBlock() {
  const group = el("fieldset", { class: "field source-picker", "data-field": "source" }, [el("legend", { text: "Data source" })]);
  const row = el("div", { class: "segmented" });
  for (const s of DATA_SOURCES) {
    const id = `f-source-${s.value}`;
    row.append(el("input", { type: "radio", name: "source", id, value: s.value }), el("label", { for: id, text: s.label }));
  }
  group.append(row, el("p", { class: "field-error", id: "f-source-error", role: "alert" }));
  return group;
}

export class ConfigForm {
  constructor(form) {
    this.form = form;
    this.fields = NO_FIELDS;
    this.generalErrors = form.querySelector("#config-errors");
    this.form.addEventListener("change", (event) => {
      if (event.target.name === "method" || event.target.name === "source") this.#syncVisibility();
    });
    /** Settles once the form is drawn: its fields as the server's schema describes a run (config-fields.js). */
    this.ready = loadFieldTable().catch((err) => {
      notify(`Cannot show the run settings: ${err.message}`, "error");  // the pickers alone, saying why
      return NO_FIELDS;
    }).then((fields) => {
      this.fields = fields;
      this.#render();
      this.reset();
    });
  }

  #render() {
    const basic = (section) => this.fields.basic.filter((s) => s.section === section).map(fieldBlock);
    const [first, ...rest] = basic("model");  // the model itself, then the method, then the rest
    this.form.querySelector('[data-fields="model"]').append(...(first ? [first] : []), methodBlock(), ...rest);
    this.form.querySelector('[data-fields="data"]').prepend(sourceBlock(), ...basic("data"));
    this.form.querySelector('[data-fields="train"]').append(...basic("train"));
    this.form.querySelector('[data-fields="more"]').append(...basic("more"));
    // Each advanced section folds on its own, so opening "Advanced" shows a list of them.
    const advanced = this.form.querySelector('[data-fields="advanced"]');
    const sections = [...new Set(this.fields.advanced.map((s) => s.section))];
    for (const name of sections) {
      const set = el("div", { class: "field-group" }, this.fields.advanced.filter((s) => s.section === name).map(fieldBlock));
      advanced.append(el("details", { class: "form-section" }, [el("summary", { text: name }), set]));
    }
  }

  get method() {
    return this.form.elements.method.value;
  }

  get source() {
    return this.form.querySelector('input[name="source"]:checked')?.value || "local";
  }

  #syncVisibility() {
    const adapter = ADAPTER_METHODS.has(this.method);
    for (const block of this.form.querySelectorAll("[data-adapter-only]")) block.hidden = !adapter;
    for (const block of this.form.querySelectorAll("[data-source]")) block.hidden = block.dataset.source !== this.source;
    const method = METHODS.find((m) => m.value === this.method);
    this.form.querySelector("#f-method-help").textContent = method ? method.help : "";
  }

  #input(name) {
    return this.form.querySelector(`#${idFor(name)}`);
  }

  /** Back to the defaults: LoRA on local files. */
  reset() {
    for (const spec of this.fields.all) writeValue(spec, this.#input(spec.name), spec.def);
    this.form.elements.method.value = "lora";
    this.form.querySelector("#f-source-local").checked = true;
    this.clearErrors();
    this.#syncVisibility();
  }

  /**
   * The RunConfig body for the current form, leaving out settings still at their default
   * (so a saved YAML says only what was chosen). Returns {config, errors}.
   */
  read() {
    const config = { ...METHOD_SETTINGS[this.method] };
    const errors = [];
    const adapter = ADAPTER_METHODS.has(this.method);
    for (const spec of this.fields.all) {
      if (spec.source && spec.source !== this.source) continue;
      if (spec.adapterOnly && !adapter) continue;
      const { value, error } = readValue(spec, this.#input(spec.name));
      if (error) errors.push({ field: spec.name, message: error });
      if (value === undefined || (!spec.required && sameValue(value, spec.def))) continue;
      setPath(config, spec.name, value);
    }
    return { config, errors };
  }

  /** Fill the form from a config object; returns the keys it did not recognise. */
  write(config) {
    this.reset();
    const known = new Set([...this.fields.all.map((s) => s.name.split(".")[0]), ...METHOD_FIELDS]);
    const unknown = Object.keys(config).filter((key) => !known.has(key));
    for (const spec of this.fields.all) {
      const value = getPath(config, spec.name);
      if (value !== undefined) writeValue(spec, this.#input(spec.name), value);
    }
    this.form.elements.method.value = methodOf(config);
    const source = config.s3 ? "s3" : config.dataset ? "hub" : "local";
    this.form.querySelector(`#f-source-${source}`).checked = true;
    this.#syncVisibility();
    return unknown;
  }

  clearErrors() {
    for (const slot of this.form.querySelectorAll(".field-error")) slot.textContent = "";
    for (const input of this.form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    this.generalErrors.replaceChildren();
    this.generalErrors.hidden = true;
  }

  /**
   * Put every error beside its field, in words that name it ("Batch size must be 1 or
   * more"), opening the folded sections that hold one; errors with no field on the form
   * go to the top. Returns the names of the fields at fault, for a notice.
   */
  showErrors(errors) {
    this.clearErrors();
    const named = [];
    for (const { field, message } of errors) {
      const block = this.#blockFor(field || "");
      const label = this.labelOf(field || "");
      if (!named.includes(label)) named.push(label);
      const text = this.describe({ field, message });
      if (!block) {
        this.generalErrors.append(el("li", { text }));
        this.generalErrors.hidden = false;
        continue;
      }
      const slot = block.querySelector(".field-error");
      slot.textContent = slot.textContent ? `${slot.textContent} ${text}` : text;
      const control = block.querySelector("input, select, textarea");
      control.setAttribute("aria-invalid", "true");
      for (let details = block.closest("details"); details; details = details.parentElement.closest("details")) details.open = true;
    }
    const first = this.form.querySelector('[aria-invalid="true"]');  // the topmost, whatever order the errors came in
    if (first) first.focus();
    else if (!this.generalErrors.hidden) this.generalErrors.scrollIntoView({ block: "nearest" });
    return named.filter(Boolean);
  }

  /** One error as a sentence naming its field: "Model is required". */
  describe({ field, message }) {
    return field ? sentence(this.labelOf(field), message) : message;
  }

  /** The form's own name for a server field (`learning_rate` -> "Learning rate"); else the field itself. */
  labelOf(field) {
    if (METHOD_FIELDS.includes(field)) return "Method";
    if (field === "dataset" && this.source !== "hub") return "Data";
    const parts = field.replace(/\[\d+\]/g, "").split(".");
    for (let n = parts.length; n > 0; n--) {
      const spec = this.fields.all.find((s) => s.name === parts.slice(0, n).join("."));
      if (spec) return spec.label;
    }
    return field;
  }

  /** The visible block that owns a server field name such as `local_datasets.0` or `use_dora`. */
  #blockFor(field) {
    if (METHOD_FIELDS.includes(field)) return this.form.querySelector('[data-field="method"]');
    if (field === "dataset" && this.source !== "hub") return this.form.querySelector('[data-field="source"]');
    if (field === "s3") return this.form.querySelector('[data-field="source"]');
    const parts = field.replace(/\[\d+\]/g, "").split(".");
    for (let n = parts.length; n > 0; n--) {
      const block = this.form.querySelector(`[data-field="${CSS.escape(parts.slice(0, n).join("."))}"]`);
      if (block && !block.hidden) return block;
    }
    return null;
  }
}

/** "Batch size" + "must be 1 or more" -> "Batch size must be 1 or more"; other messages follow a colon. */
function sentence(label, message) {
  if (!label) return message;
  return /^(must|is|are|should|cannot|needs|has|does) /.test(message) ? `${label} ${message}` : `${label}: ${message}`;
}

function methodOf(config) {
  const type = config.training_type || "lora";
  if (type !== "lora") return type;
  if (config.use_dora) return "dora";
  if (config.use_rslora) return "rslora";
  if (config.use_loftq) return "loftq";
  return "lora";
}

function readValue(spec, input) {
  const raw = spec.kind === "bool" ? input.checked : input.value;
  switch (spec.kind) {
    case "bool":
      return { value: raw };
    case "tristate":
      return { value: raw === "" ? null : raw === "true" };
    case "int":
    case "float": {
      const text = raw.trim();
      if (text === "") return { value: undefined };
      const number = Number(text);
      const ok = Number.isFinite(number) && (spec.kind === "float" || Number.isInteger(number));
      return ok ? { value: number } : { error: spec.kind === "int" ? `“${text}” is not a whole number` : `“${text}” is not a number (e.g. 0.0002 or 2e-4)` };
    }
    case "list": {
      const items = raw.split("\n").map((s) => s.trim()).filter(Boolean);
      return { value: items.length ? items : undefined };
    }
    case "intlist": {
      const items = raw.split(/[\s,]+/).filter(Boolean);
      if (!items.length) return { value: undefined };
      const bad = items.filter((s) => !/^\d+$/.test(s));
      return bad.length ? { error: `${bad.join(", ")}: give device numbers like 0, 1` } : { value: items.map(Number) };
    }
    case "map": {
      const mapping = {};
      for (const line of raw.split("\n").map((s) => s.trim()).filter(Boolean)) {
        const at = line.indexOf(":");
        if (at <= 0 || !line.slice(at + 1).trim()) return { error: `“${line}” is not “key: value”` };
        mapping[line.slice(0, at).trim()] = line.slice(at + 1).trim();
      }
      return { value: Object.keys(mapping).length ? mapping : undefined };
    }
    case "jsonlist": {
      const items = [];
      for (const line of raw.split("\n").map((s) => s.trim()).filter(Boolean)) {
        let item;
        try { item = JSON.parse(line); } catch { item = undefined; }
        if (!item || typeof item !== "object" || Array.isArray(item)) return { error: `“${line}” is not a JSON object like {"name": "exact_match", "weight": 1}` };
        items.push(item);
      }
      return { value: items.length ? items : undefined };
    }
    default: {
      const text = raw.trim();
      return { value: text === "" ? undefined : text };
    }
  }
}

function writeValue(spec, input, value) {
  switch (spec.kind) {
    case "bool":
      input.checked = value === true || value === "true";
      break;
    case "tristate":
      input.value = value === null || value === undefined ? "" : String(Boolean(value));
      break;
    case "list":
      input.value = Array.isArray(value) ? value.join("\n") : value ?? "";
      break;
    case "intlist":
      input.value = Array.isArray(value) ? value.join(", ") : value ?? "";
      break;
    case "jsonlist":
      input.value = Array.isArray(value) ? value.map((item) => JSON.stringify(item)).join("\n") : "";
      break;
    case "map":
      input.value = value && typeof value === "object" ? Object.entries(value).map(([k, v]) => `${k}: ${v}`).join("\n") : "";
      break;
    default:
      input.value = value === null || value === undefined ? "" : String(value);
  }
}

function sameValue(a, b) {
  if (Array.isArray(b) || (b && typeof b === "object")) return JSON.stringify(a) === JSON.stringify(b);
  return a === b;
}

function setPath(target, path, value) {
  const [head, tail] = path.split(".");
  if (!tail) target[head] = value;
  else (target[head] ||= {})[tail] = value;
}

function getPath(source, path) {
  const [head, tail] = path.split(".");
  if (!tail) return source[head];
  return source[head] && typeof source[head] === "object" ? source[head][tail] : undefined;
}
