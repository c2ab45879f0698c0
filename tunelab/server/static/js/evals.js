/**
 * A finished run's evaluations in the history: an "Evaluate" button (loss and perplexity
 * on the eval split, and the eval prompts answered by the base and the fine-tune — for a
 * speech-to-text run its transcripts of the eval clips and their word error rate) and a
 * fold-out "Evaluations" section with the stored results, the answers side by side.
 * Everything from a model or data is set as text, never as markup.
 */

import { request } from "./api.js";
import { fmtNumber, fmtTime } from "./format.js";
import { notify } from "./notice.js";
import { el } from "./dom.js";
import { cannotUse, guard } from "./rights.js";

const path = (id) => `/api/runs/${encodeURIComponent(id)}`;

/** A message's text, with [image] / [audio] where a media part was. */
function contentText(content) {
  if (!Array.isArray(content)) return String(content ?? "");
  return content.map((part) => (part.type === "image" || part.type === "audio" ? `[${part.type}]` : part.text || "")).join("");
}

function promptText(item) {
  if (item.messages) return item.messages.map((m) => `${m.role}: ${contentText(m.content)}`).join("\n");
  return item.prompt || "";
}

/** A speech-to-text run's word error rate, base beside fine-tune. */
function werView(payload) {
  const table = el("table", "eval-table eval-wer");
  table.append(el("caption", "", `Word error rate on ${payload.rows} eval clips (${what(payload)})`));
  const head = el("tr");
  for (const label of ["", "Word error rate"]) head.append(el("th", "", label));
  table.append(head);
  for (const [label, side] of [["Base", "base"], ["Fine-tune", "fine_tune"]]) {
    const row = el("tr");
    row.append(el("th", "", label), el("td", "", fmtNumber(payload.wer[side])));
    table.append(row);
  }
  return table;
}

function what(payload) {
  return payload.step === null || payload.step === undefined ? "final weights" : `checkpoint ${payload.step}`;
}

function perplexityView(payload) {
  const table = el("table", "eval-table");
  const head = el("tr");
  for (const label of ["", "Loss", "Perplexity"]) head.append(el("th", "", label));
  table.append(head);
  for (const [label, side] of [["Base", "base"], ["Fine-tune", "fine_tune"]]) {
    const row = el("tr");
    row.append(el("th", "", label), el("td", "", fmtNumber(payload[side]?.loss)), el("td", "", fmtNumber(payload[side]?.perplexity)));
    table.append(row);
  }
  const caption = el("caption", "", `Eval split: ${payload.rows} rows, ${payload.tokens} tokens (${what(payload)}, ${payload.device})`);
  table.prepend(caption);
  return table;
}

function generationsView(payload) {
  const wrap = el("div", "eval-generations");
  if (payload.wer) wrap.append(werView(payload));
  wrap.append(el("p", "eval-note", `${payload.items.length} prompts from ${payload.source} (${what(payload)}, greedy, at most ${payload.sampling?.max_new_tokens} tokens)`));
  for (const item of payload.items) {
    const block = el("div", "eval-item");
    block.append(el("pre", "eval-prompt", promptText(item)));
    const sides = el("div", "eval-sides");
    const side = (label, text) => {
      const col = el("div", "eval-side");
      col.append(el("h4", "", label), el("pre", "", text));
      return col;
    };
    sides.append(side("Base", item.base?.text ?? ""), side("Fine-tune", item.fine_tune?.text ?? ""));
    if (item.reference !== undefined) sides.append(side("Reference", item.reference));
    block.append(sides);
    wrap.append(block);
  }
  return wrap;
}

function lmEvalView(payload) {
  const table = el("table", "eval-table");
  table.append(el("caption", "", `lm-eval (${what(payload)})`));
  for (const [task, scores] of Object.entries(payload.scores || {})) {
    const row = el("tr");
    row.append(el("th", "", task), el("td", "", Object.entries(scores).map(([k, v]) => `${k} ${fmtNumber(v)}`).join(" · ")));
    table.append(row);
  }
  return table;
}

const VIEWS = { perplexity: perplexityView, generations: generationsView, lm_eval: lmEvalView };

function render(body, evals) {
  if (!evals.length) {
    body.replaceChildren(el("p", "empty", "No evaluations yet: press Evaluate."));
    return;
  }
  body.replaceChildren(...evals.map((record) => {
    const section = el("section", "eval-record");
    section.dataset.kind = record.kind;
    section.append(el("p", "eval-when", `#${record.id} · ${fmtTime(record.created_at)}`), VIEWS[record.kind](record.payload));
    return section;
  }));
}

/** { button, details } for a run with weights to evaluate (the history decides which). */
export function evalSection(run, name) {
  const details = el("details", "run-evals");
  const summary = el("summary", "", "Evaluations");
  const body = el("div", "run-evals-body");
  details.append(summary, body);
  const load = async () => {
    try {
      render(body, (await request("GET", `${path(run.id)}/evals`)).evals);
    } catch (err) {
      body.replaceChildren(el("p", "run-error-line", `Cannot load the evaluations: ${err.message}`));
    }
  };
  details.addEventListener("toggle", () => { if (details.open) load(); });

  const button = el("button", "secondary", "Evaluate");
  button.type = "button";
  button.setAttribute("aria-label", `Evaluate ${name}`);
  guard(button, cannotUse());
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = "Evaluating…";
    try {
      await request("POST", `${path(run.id)}/eval`, {});
      notify(`Evaluated ${name}.`);
      details.open = true;
      await load();
    } catch (err) {
      notify(`Cannot evaluate ${name}: ${err.message}`, "error");
    } finally {
      guard(button, cannotUse());
      button.textContent = "Evaluate";
    }
  });
  return { button, details };
}
