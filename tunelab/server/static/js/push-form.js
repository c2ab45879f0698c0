/**
 * The "Push to the Hugging Face Hub" part of the Export dialog: repo id, token, what to
 * push and a private checkbox, sent to POST /api/runs/{id}/push. The token travels in
 * the request body only: it is never put in a URL or stored (not in localStorage, and
 * the field is emptied whenever the dialog opens and after a push has landed). An error
 * names its field and marks that input, as the server's answer says.
 */

import { api } from "./api.js";
import { runName } from "./history.js";
import { notify } from "./notice.js";
import { cannotManage, guard } from "./rights.js";

const $ = (id) => document.getElementById(id);
const INPUTS = { repo_id: "push-repo-id", token: "push-token", format: "push-format", private: "push-private" };

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

export class PushForm {
  /** `onExported(run)`: a push wrote a new export (the dialog lists it for download). */
  constructor(onExported) {
    this.onExported = onExported;
    this.run = null;
    this.busy = false;
    $("push-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#submit();
    });
  }

  /** Show the form for `run`, emptied (the token above all) and guarded by the caller's rights. */
  open(run) {
    this.run = run;
    $("push-token").value = "";
    $("push-private").checked = false;
    $("push-error").textContent = "";
    $("push-result").replaceChildren();
    this.#mark(null);
    guard($("push-start"), cannotManage(run), this.busy);
  }

  #mark(field) {
    for (const [name, id] of Object.entries(INPUTS)) {
      if (name === field) $(id).setAttribute("aria-invalid", "true");
      else $(id).removeAttribute("aria-invalid");
    }
  }

  async #submit() {
    if (this.busy) return;
    const run = this.run;
    const body = { repo_id: $("push-repo-id").value.trim(), token: $("push-token").value.trim(),
                   format: $("push-format").value, private: $("push-private").checked };
    this.busy = true;
    $("push-start").disabled = true;
    $("push-error").textContent = "";
    this.#mark(null);
    $("push-result").replaceChildren(el("p", { class: "help" }, `Pushing to ${body.repo_id}… a merge or GGUF export first can take minutes.`));
    try {
      const answer = await api.pushRun(run.id, body);
      $("push-token").value = "";
      const link = el("a", { href: answer.repo_url, target: "_blank", rel: "noopener noreferrer" }, answer.repo_url);
      const files = el("ul", { class: "export-files" });
      for (const file of answer.files) files.append(el("li", {}, file));
      const done = el("p", { class: "push-done" }, `Pushed ${answer.format} to ${answer.created ? "a new" : "the existing"} repo `);
      done.append(link);
      $("push-result").replaceChildren(done, files);
      notify(`Pushed ${runName(run)} to ${answer.repo_id}.`);
      if (answer.exported_now) this.onExported(run);
    } catch (err) {
      $("push-result").replaceChildren();
      $("push-error").textContent = err.field ? `${err.field}: ${err.message}` : err.message;
      this.#mark(err.field);
    } finally {
      this.busy = false;
      guard($("push-start"), cannotManage(run));
    }
  }
}
