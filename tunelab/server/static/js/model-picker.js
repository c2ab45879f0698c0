/**
 * The Model field's suggestions: the models this server can already use (the demo,
 * finished runs to continue from, model folders in the data roots, the local Hugging
 * Face cache), from GET /api/models/local, offered through a datalist. Typing any other
 * hub id or folder still works; the list only saves looking paths up.
 */

import { api } from "./api.js";

const $ = (id) => document.getElementById(id);
const LIST_ID = "local-models";

export async function loadModelPicker() {
  const input = $("f-model_name");
  if (!input) return;
  input.setAttribute("list", LIST_ID);
  const list = $(LIST_ID) || document.body.appendChild(Object.assign(document.createElement("datalist"), { id: LIST_ID }));
  let note = $("model-picker-note");
  if (!note) {
    note = Object.assign(document.createElement("p"), { id: "model-picker-note", className: "help" });
    input.closest(".field").append(note);
  }
  let answer;
  try {
    answer = await api.localModels();
  } catch {
    return;  // the field still takes typed names; a 401 is asked about elsewhere
  }
  const options = answer.models.map((model) => {
    const option = document.createElement("option");
    option.value = model.name;
    option.label = model.label;
    option.dataset.kind = model.kind;
    return option;
  });
  list.replaceChildren(...options);
  const count = answer.models.length;
  note.textContent = count
    ? `${count}${answer.truncated ? "+" : ""} model${count === 1 ? "" : "s"} on this machine: pick one from the list, or type a hub id or folder.`
    : "No model found on this machine yet; type a hub id (org/name) or a model folder.";
}
