/**
 * "Active and queued runs": every run this server trains now (status, owner, devices,
 * step, a Stop button, and ▶ to watch it in the run panel) and every run waiting for devices (its place, priority, owner
 * and the devices it asked for, with Move up / Move down, a priority to set, and Cancel).
 *
 * The list is GET /api/queue, polled while the page is visible; changes go through
 * POST /api/runs/{id}/queue (place, priority) and POST /api/runs/{id}/stop with save: true
 * (stop with a checkpoint; a queued run is withdrawn). The server decides who may change what (a member
 * only its own runs, priorities an admin) and says why when it refuses, shown as a notice; the
 * controls the signed-in key may not use are disabled beforehand, the reason on hover (rights.js).
 */

import { request } from "./api.js";
import { fmtInt, fmtTime } from "./format.js";
import { notify } from "./notice.js";
import { cannotManage, cannotPrioritise, cannotSwap, guard } from "./rights.js";
import { button, el } from "./dom.js";

const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

export const queueApi = {
  get: () => request("GET", "/api/queue"),
  change: (id, change) => request("POST", `/api/runs/${enc(id)}/queue`, change),
  stop: (id, save) => request("POST", `/api/runs/${enc(id)}/stop`, { save }),
};

const nameOf = (run) => run.display_name || `Run #${run.id}`;
/** What a queued run asked for: "GPU 0, 3", "2 GPUs", or one device (a GPU, or the CPU). */
function wanted(request) {
  if (request && Array.isArray(request.gpu_ids) && request.gpu_ids.length) return `GPU ${request.gpu_ids.join(", ")}`;
  const count = (request && request.num_gpus) || 1;
  return count > 1 ? `${count} GPUs` : "1 device";
}

export class QueuePanel {
  /**
   * @param onChanged called when a run joins or leaves the lists (the history refreshes then)
   * @param onWatch called with a training run's id when its ▶ is pressed (the run panel shows it)
   */
  constructor({ onChanged = () => {}, onWatch = () => {} } = {}) {
    this.onChanged = onChanged;
    this.onWatch = onWatch;
    this.seen = "";
    this.timer = null;
    this.busy = false;
  }

  start() {
    if (!this.timer) this.timer = setInterval(() => { if (!document.hidden) this.refresh(); }, POLL_MS);
    return this.refresh();
  }

  async refresh() {
    let answer;
    try {
      answer = await queueApi.get();
    } catch (err) {
      if (err.status !== 401) $("queue-state").textContent = `Cannot load the active and queued runs: ${err.message}`;
      return;
    }
    $("queue-state").textContent = "";
    const { active, queued } = answer;
    $("queue-list").replaceChildren(...active.map((run) => this.#activeRow(run)),
      ...queued.map((run, i) => this.#queuedRow(run, queued[i - 1], queued[i + 1], queued.length)));
    $("queue-empty").hidden = active.length + queued.length > 0;
    const ids = [...active, ...queued].map((run) => `${run.id}:${run.queue_position ?? "a"}`).join(",");
    if (ids !== this.seen) {
      const first = this.seen === "";
      this.seen = ids;
      if (!first) this.onChanged();
    }
  }

  #facts(pairs) {
    const facts = el("dl", "run-facts");
    for (const [label, value] of pairs) {
      const wrap = el("div");
      wrap.append(el("dt", "", label), el("dd", "", value));
      facts.append(wrap);
    }
    return facts;
  }

  #item(run, status) {
    const item = el("li", "run queue-run");
    item.dataset.runId = String(run.id);
    item.dataset.status = status;
    const title = el("div", "run-title");
    title.append(el("h3", "run-name", nameOf(run)), el("p", "run-source", run.model_name));
    const badge = el("span", "badge", status);
    badge.dataset.phase = status;
    return { item, title, badge };
  }

  #activeRow(run) {
    const { item, title, badge } = this.#item(run, run.phase || "running");
    const steps = run.total_steps ? `${fmtInt(run.step)} / ${fmtInt(run.total_steps)}` : fmtInt(run.step);
    const progress = el("progress", "queue-progress");
    progress.max = run.total_steps || 1;
    progress.value = run.total_steps ? Math.min(run.step, run.total_steps) : 0;
    progress.setAttribute("aria-label", `${nameOf(run)} progress`);
    const facts = this.#facts([["Owner", run.owner || "–"], ["Devices", (run.devices || []).join(", ") || "–"],
      ["Step", steps], ["Started", fmtTime(run.started_at)]]);
    const actions = el("div", "run-actions");
    actions.append(guard(button("Stop", "danger", `Stop ${nameOf(run)}`, () => this.#act(
      () => queueApi.stop(run.id, true), `Stopping ${nameOf(run)} at its next step; its checkpoint is kept.`)),
    cannotManage(run)));
    const watch = button("▶", "quiet queue-mark", `Watch ${nameOf(run)} in the run panel`, () => this.onWatch(run.id));
    watch.title = "Show this run's live charts in the run panel";
    item.append(watch, title, badge, facts, progress, actions);
    return item;
  }

  #queuedRow(run, before, after, total) {
    const name = nameOf(run);
    const { item, title, badge } = this.#item(run, "queued");
    const facts = this.#facts([["Position", `${run.queue_position} of ${total}`], ["Priority", String(run.queue_priority)],
      ["Owner", run.owner || "–"], ["Wants", wanted(run.device_request)], ["Queued", fmtTime(run.queued_at)]]);
    const priority = el("input", "queue-priority");
    priority.type = "number";
    priority.step = "1";
    priority.value = String(run.queue_priority);
    priority.setAttribute("aria-label", `Priority of ${name}`);
    const actions = el("div", "run-actions");
    // The server keeps priority first: a run moves only among the runs of its own priority.
    const up = button("Move up", "quiet", `Move ${name} up`, () => this.#act(
      () => queueApi.change(run.id, { position: run.queue_position - 1 }), `Moved ${name} up.`));
    guard(up, before && cannotSwap(run, before), !before || before.queue_priority !== run.queue_priority);
    const down = button("Move down", "quiet", `Move ${name} down`, () => this.#act(
      () => queueApi.change(run.id, { position: run.queue_position + 1 }), `Moved ${name} down.`));
    guard(down, after && cannotSwap(run, after), !after || after.queue_priority !== run.queue_priority);
    const setPriority = button("Set priority", "quiet", `Set the priority of ${name}`, () => {
      const value = Number(priority.value);
      if (!Number.isInteger(value)) {
        notify(`Priority of ${name}: give a whole number (higher starts first).`, "error");
        return;
      }
      this.#act(() => queueApi.change(run.id, { priority: value }), `${name} now has priority ${value}.`);
    });
    // save: true withdraws a queued run all the same; should it have started since this list
    // was drawn, it stops with a checkpoint instead of losing its folder.
    const cancel = guard(button("Cancel", "quiet danger-text", `Cancel ${name}`, () => this.#act(
      () => queueApi.stop(run.id, true), (answer) => (answer.outcome === "cancelled"
        ? `Cancelled ${name}; it will not start.`
        : `${name} had started: it stops at its next step and keeps a checkpoint.`))), cannotManage(run));
    guard(priority, cannotPrioritise());
    guard(setPriority, cannotPrioritise());
    actions.append(up, down, priority, setPriority, cancel);
    item.append(el("span", "queue-mark", `#${run.queue_position}`), title, badge, facts, el("span"), actions);
    return item;
  }

  /** Run `call`; then notify `done` (a text, or a function of the answer giving one). */
  async #act(call, done) {
    if (this.busy) return;
    this.busy = true;
    try {
      const answer = await call();
      notify(typeof done === "function" ? done(answer) : done);
    } catch (err) {
      if (err.status !== 401) notify(err.message, "error");
    } finally {
      this.busy = false;
    }
    await this.refresh();
  }
}
