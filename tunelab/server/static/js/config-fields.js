/**
 * The run settings the form shows, read from the server's own description of a run: the
 * `RunConfig` schema in /openapi.json (as the export dialog reads `ExportRequest`), so a
 * setting the server gains appears on the form without a page change. Each field's
 * schema carries its label, section, place and hints (tunelab/config/form.py); its input
 * follows from its type. A nested group (s3, nodes) gives one field per setting inside,
 * named `group.setting`; the settings the method picker stands for get no input.
 *
 * Kinds: text, secret (never saved to YAML), int, float, bool, select, tristate
 * (auto/on/off -> null/true/false), list (one item per line), intlist ("0, 1"),
 * map (one `key: value` per line), jsonlist (one JSON object per line).
 * `adapterOnly` fields are hidden when the method trains no adapter; `source` fields
 * show with their data source only.
 */

import { api } from "./api.js";
import { METHOD_FIELDS } from "./config-pickers.js";

const SCHEMA = "RunConfig";
/** Sections drawn in the page's own places, in this order; every other one folds under "Advanced". */
const BASIC_SECTIONS = ["model", "data", "train", "more"];

let table = { basic: [], advanced: [], all: [] };

/** A schema with its `$ref` (or single-entry allOf, as older pydantic writes) looked up in `schemas`. */
function resolve(schema, schemas) {
  let found = schema;
  if (found.allOf && found.allOf.length === 1) found = { ...found, ...found.allOf[0] };
  if (found.$ref) found = { ...(schemas[found.$ref.split("/").pop()] || {}), ...found };
  return found;
}

/** A property's value schema (its non-null variant) and whether it may be null. */
function valueOf(prop, schemas) {
  const variants = (prop.anyOf || [prop]).map((v) => resolve(v, schemas));
  const value = variants.find((v) => v.type !== "null") || {};
  return { value, nullable: variants.some((v) => v.type === "null") };
}

function kindOf(prop, value, nullable, schemas) {
  if (prop.options || value.enum) return "select";
  switch (value.type) {
    case "boolean":
      return nullable ? "tristate" : "bool";
    case "integer":
      return "int";
    case "number":
      return "float";
    case "array": {
      const items = resolve(value.items || {}, schemas);
      return items.properties ? "jsonlist" : items.type === "integer" ? "intlist" : "list";
    }
    case "object":
      return "map";
    default:
      return value.format === "password" ? "secret" : "text";
  }
}

/** Its default; where the schema gives none (null, a factory, required): `[]` for a list, `{}` for a mapping, else null. */
function defaultOf(prop, kind, nullable) {
  if ("default" in prop) return prop.default;
  if (nullable) return null;
  return kind === "list" || kind === "jsonlist" ? [] : kind === "map" ? {} : null;
}

function fieldOf(name, prop, schemas, required) {
  const { value, nullable } = valueOf(prop, schemas);
  const kind = kindOf(prop, value, nullable, schemas);
  const spec = { name, label: prop.label || name, kind, def: defaultOf(prop, kind, nullable), section: prop.section || "Other", order: prop.order ?? Infinity };
  if (kind === "select") spec.options = prop.options || value.enum;
  if (required) spec.required = true;
  for (const hint of ["help", "placeholder", "source", "adapterOnly", "wide"]) if (prop[hint] !== undefined) spec[hint] = prop[hint];
  return spec;
}

/** Every input of the form, in its place: by `order`, then the schema's own order. */
function tableFromSchema(schema, schemas) {
  const fields = [];
  const required = new Set(schema.required || []);
  for (const [name, prop] of Object.entries(schema.properties)) {
    if (METHOD_FIELDS.includes(name)) continue;
    const { value } = valueOf(prop, schemas);
    if (value.properties) {  // a nested group: its settings, each under `name.setting`
      for (const [inner, innerProp] of Object.entries(value.properties)) fields.push(fieldOf(`${name}.${inner}`, innerProp, schemas, false));
    } else {
      fields.push(fieldOf(name, prop, schemas, required.has(name)));
    }
  }
  const all = fields.sort((a, b) => (a.order === b.order ? 0 : a.order < b.order ? -1 : 1));
  return {
    basic: all.filter((f) => BASIC_SECTIONS.includes(f.section)),
    advanced: all.filter((f) => !BASIC_SECTIONS.includes(f.section)),
    all,
  };
}

/** Fetch the schema and build the table (once, before the form is drawn). */
export async function loadFieldTable() {
  const doc = await api.openapi();
  const schemas = (doc && doc.components && doc.components.schemas) || {};
  const schema = schemas[SCHEMA];
  if (!schema || !schema.properties) throw new Error(`the server describes no ${SCHEMA}`);
  table = tableFromSchema(schema, schemas);
  return table;
}

/** The form's label for a setting (its name before the table is loaded), so other panels name it in the form's words. */
export const fieldLabel = (name) => table.all.find((field) => field.name === name)?.label ?? name;
