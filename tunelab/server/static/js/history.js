/**
 * The run history: a paged list, newest first, with each run's status, loss sparkline,
 * final loss and duration, and the actions on it (rename, resume, delete, select for
 * comparison; chat, compare with its base and export, for a run with weights to use;
 * evaluate, with the run's evaluations folding out below it; for a text-to-speech run,
 * speak in place of chat and evaluate, and its spoken samples, one per eval step, to
 * play; where a run's family cannot chat or be evaluated, a note on its row says why).
 * The selection survives paging and refreshes. An action the signed-in key may not take
 * on a run (another member's, or any for a viewer) is disabled, the reason on hover
 * (rights.js).
 */

import { api } from "./api.js";
import { evalSection } from "./evals.js";
import { fmtDuration, fmtInt, fmtNumber, fmtTime, sparkline } from "./format.js";
import { notify } from "./notice.js";
import { cannotManage, guard } from "./rights.js";
import { samplesSection } from "./sample-list.js";
import { speakSection } from "./speak.js";
import { button, el } from "./dom.js";

const PAGE_SIZE = 20;
const $ = (id) => document.getElementById(id);

export const runName = (run) => run.display_name || `Run #${run.id}`;
// What a run of each modality can do, from the model family specs (GET /api/models/families):
// a text-to-speech run speaks in place of chat; where a family cannot chat or be evaluated,
// its note says why in place of the button; `media` is what its chat attaches (playground.js).
// Asked once; asked again after a failure.
let rulesAsked = null;
export const modalityRules = () => {
  rulesAsked ??= api.families().then(({ families }) => {
    const rules = {};
    for (const f of families) {
      rules[f.modality] ??= { speaks: f.serves === "speak", noChat: f.no_chat, noEval: f.no_eval, media: f.media };
    }
    return rules;
  }).catch((err) => {
    rulesAsked = null;
    throw err;
  });
  return rulesAsked;
};
/** A finished run, or one stopped with its checkpoint kept (not cancelled). */
const hasWeights = (run) => run.status === "completed" || (run.status === "stopped" && !run.cancel_requested && !!run.output_dir);

export class HistoryPanel {
  /**
   * @param onResumed called with the answer ({job_id, queued, ...}) after a resume starts
   *   (the current run panel follows it unless it waits in the queue)
   * @param onCompare called with the selected run ids
   * @param onChat called with a run and whether to compare it with its base
   * @param onExport called with a run to export
   */
  constructor({ onResumed, onCompare, onChat = () => {}, onExport = () => {} }) {
    this.onResumed = onResumed;
    this.onCompare = onCompare;
    this.onChat = onChat;
    this.onExport = onExport;
    this.offset = 0;
    this.total = 0;
    this.selected = new Set();
    this.rules = {}; // modality -> { speaks, noChat, noEval, media } (modalityRules)
    $("refresh-runs").addEventListener("click", () => this.refresh());
    $("runs-newer").addEventListener("click", () => this.#page(-PAGE_SIZE));
    $("runs-older").addEventListener("click", () => this.#page(PAGE_SIZE));
    $("compare-runs").addEventListener("click", () => this.onCompare([...this.selected].sort((a, b) => a - b)));
  }

  async refresh() {
    let answer;
    try {
      [answer, this.rules] = await Promise.all([api.listRuns(PAGE_SIZE, this.offset), modalityRules()]);
    } catch (err) {
      if (err.status !== 401) notify(`Cannot load the history: ${err.message}`, "error");
      return;
    }
    if (!answer.runs.length && this.offset > 0) {
      this.offset = Math.max(0, this.offset - PAGE_SIZE);
      return this.refresh();
    }
    this.total = answer.total;
    $("runs-list").replaceChildren(...answer.runs.map((run) => this.#row(run)));
    $("runs-empty").hidden = this.total > 0;
    const last = this.offset + answer.runs.length;
    $("runs-range").textContent = this.total ? `${this.offset + 1}–${last} of ${this.total}` : "";
    $("runs-newer").disabled = this.offset === 0;
    $("runs-older").disabled = last >= this.total;
    this.#syncCompareButton();
  }

  /** Show run `runId`'s row: the page of the history that holds it, scrolled to and outlined. */
  async reveal(runId) {
    let offset = 0;
    for (;;) {
      let answer;
      try {
        answer = await api.listRuns(PAGE_SIZE, offset);
      } catch (err) {
        if (err.status !== 401) notify(`Cannot load the history: ${err.message}`, "error");
        return;
      }
      if (answer.runs.some((run) => run.id === runId)) break;
      // Newest first: a run older than this page's last is further on.
      if (!answer.runs.length || offset + answer.runs.length >= answer.total) {
        notify(`Run #${runId} is not in the history (deleted?).`, "error");
        return;
      }
      offset += PAGE_SIZE;
    }
    this.offset = offset;
    await this.refresh();
    const row = $("runs-list").querySelector(`li[data-run-id="${runId}"]`);
    if (!row) return;
    for (const other of $("runs-list").querySelectorAll(".is-revealed")) other.classList.remove("is-revealed");
    row.classList.add("is-revealed");
    row.tabIndex = -1;
    row.scrollIntoView({ behavior: "smooth", block: "center" });
    row.focus({ preventScroll: true });
  }

  #page(delta) {
    this.offset = Math.max(0, this.offset + delta);
    this.refresh();
  }

  #syncCompareButton() {
    const n = this.selected.size;
    const compare = $("compare-runs");
    compare.disabled = n < 2;
    compare.textContent = n ? `Compare selected (${n})` : "Compare selected";
  }

  #row(run) {
    const name = runName(run);
    const item = el("li", "run");
    item.dataset.runId = String(run.id);
    item.dataset.status = run.status;

    const pick = el("input");
    pick.type = "checkbox";
    pick.className = "run-select";
    pick.checked = this.selected.has(run.id);
    pick.setAttribute("aria-label", `Select ${name} to compare`);
    pick.addEventListener("change", () => {
      if (pick.checked) this.selected.add(run.id);
      else this.selected.delete(run.id);
      this.#syncCompareButton();
    });

    const title = el("div", "run-title");
    const heading = el("h3", "run-name", name);
    title.append(heading, el("p", "run-source", `${run.model_name} · ${run.dataset_name || "–"}`));
    const lineage = [];
    if (run.resumed_from_run_id) lineage.push(`resumed from #${run.resumed_from_run_id}`);
    if (run.resumed_by_run_id) lineage.push(`resumed as #${run.resumed_by_run_id}`);
    if (lineage.length) title.append(el("p", "run-lineage", lineage.join(" · ")));
    if (run.error_message) title.append(el("p", "run-error-line", run.error_message));

    const badge = el("span", "badge", run.status);
    badge.dataset.phase = run.status;

    const facts = el("dl", "run-facts");
    const fact = (label, value) => {
      const wrap = el("div");
      wrap.append(el("dt", "", label), el("dd", "", value));
      facts.append(wrap);
    };
    fact("Started", fmtTime(run.started_at));
    fact("Duration", fmtDuration(run.duration_seconds));
    fact("Steps", run.total_steps ? `${fmtInt(run.final_step)} / ${fmtInt(run.total_steps)}` : fmtInt(run.final_step));
    fact("Final loss", fmtNumber(run.final_loss));
    // Null until the run's worker has prepared its data; rows older than modalities read "text".
    fact("Modality", run.modality || "–");
    // The API key that started the run; none for the server's own token and the CLI.
    fact("Owner", run.owner || "–");

    const spark = el("div", "run-spark");
    spark.append(sparkline(run.loss_sparkline, { label: `${name} loss` }));

    // Rename, resume, export and delete are its owner's (or an admin's): disabled for others, saying why.
    const refused = cannotManage(run);
    const owned = (node) => guard(node, refused);
    const actions = el("div", "run-actions");
    actions.append(owned(button("Rename", "quiet", `Rename ${name}`, () => this.#rename(run))));
    if (run.can_resume) actions.append(owned(button("Resume", "secondary", `Resume ${name}`, () => this.#resume(run))));
    // A text-to-speech run answers with audio: Speak takes the place of Chat (and of Evaluate, which reads text).
    const rule = this.rules[run.modality] || {};
    const speaks = hasWeights(run) && !!rule.speaks;
    const speech = speaks ? speakSection(run, name) : null;
    // What this run cannot do with its weights, said on its row rather than left unsaid.
    const notes = [];
    if (hasWeights(run)) {
      if (speaks) actions.append(speech.button);
      else if (rule.noChat) notes.push(rule.noChat);
      else {
        actions.append(button("Chat", "secondary", `Chat with ${name}`, () => this.onChat(run, false)));
        actions.append(button("Compare with base", "quiet", `Compare ${name} with its base`, () => this.onChat(run, true)));
      }
      actions.append(owned(button("Export", "quiet", `Export ${name}`, () => this.onExport(run))));
      if (rule.noEval) notes.push(rule.noEval);
    }
    // A text-to-speech run's samples are its evaluation (Speak); the others measure text or transcripts.
    const evals = hasWeights(run) && !speaks && !rule.noEval ? evalSection(run, name) : null;
    if (evals) actions.append(evals.button);
    actions.append(owned(button("Delete", "quiet danger-text", `Delete ${name}`, () => this.#delete(run))));
    for (const note of notes) title.append(el("p", "run-use-note", note));

    item.append(pick, title, badge, facts, spark, actions);
    if (evals) item.append(evals.details);
    if (speech) item.append(speech.details);
    // A text-to-speech run speaks a sample at each eval, whatever became of it afterwards.
    if (rule.speaks) item.append(samplesSection(run, name));
    return item;
  }

  #rename(run) {
    const dialog = $("rename-dialog");
    const input = $("rename-input");
    const error = $("rename-error");
    input.value = run.display_name || "";
    error.textContent = "";
    dialog.returnValue = "";
    dialog.showModal();
    input.select();
    const onClose = async () => {
      if (dialog.returnValue !== "save") return;
      const name = input.value.trim();
      try {
        await api.renameRun(run.id, name);
      } catch (err) {
        // Keep the dialog open with the reason beside the field, so it can be fixed.
        error.textContent = err.message;
        dialog.returnValue = "";
        dialog.showModal();
        dialog.addEventListener("close", onClose, { once: true });
        return;
      }
      notify(`Renamed run #${run.id} to “${name}”.`);
      this.refresh();
    };
    dialog.addEventListener("close", onClose, { once: true });
  }

  async #resume(run) {
    try {
      const answer = await api.resumeRun(run.id);
      notify(`Resuming ${runName(run)} as run #${answer.job_id}.`);
      this.onResumed(answer);
    } catch (err) {
      notify(`Cannot resume ${runName(run)}: ${err.message}`, "error");
    }
  }

  #delete(run) {
    const dialog = $("delete-dialog");
    $("delete-what").textContent = `${runName(run)} (#${run.id}, ${run.status}) will be removed from the history.`;
    $("delete-files").checked = false;
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "delete") return;
      const withFiles = $("delete-files").checked;
      try {
        await api.deleteRun(run.id, withFiles);
      } catch (err) {
        notify(`Cannot delete ${runName(run)}: ${err.message}`, "error");
        return;
      }
      this.selected.delete(run.id);
      notify(withFiles ? `Deleted ${runName(run)} and its files.` : `Deleted ${runName(run)}; its files were kept.`);
      this.refresh();
    }, { once: true });
  }
}
