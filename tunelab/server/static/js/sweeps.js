/**
 * The Sweeps section: the hyperparameter sweeps in the history (GET /api/sweeps) and, for
 * the chosen one, its trials as a table (state, objective, parameters, a button that opens
 * the trial's run in the history) with the best run marked, the objective by trial and
 * each searched setting against the objective (charts.js), and the settings' importances.
 * A member or admin starts a sweep from the Configure form's settings plus a search written
 * as YAML, and stops one its key started (an admin any); a viewer only reads (rights.js).
 * While a sweep runs, the list is read again every few seconds.
 */

import { load as loadYaml } from "../vendor/js-yaml.esm.min.js";
import { api } from "./api.js";
import { LineChart } from "./charts.js";
import { button, el } from "./dom.js";
import { fmtNumber } from "./format.js";
import { notify } from "./notice.js";
import { cannotUse, guard, signedIn } from "./rights.js";

const POLL_MS = 2000;
const COUNTED = new Set(["complete", "pruned", "failed"]);
// Trial states drawn with the history's status colours.
const STATE_PHASE = { complete: "completed", pruned: "stopped", failed: "error", interrupted: "cancelled", running: "running" };
// A searched setting whose values span more than this ratio is drawn on a log axis (a learning rate).
const LOG_SPAN = 20;
const $ = (id) => document.getElementById(id);

export class SweepsPanel {
  /**
   * @param readBase returns the Configure form's {config, errors}: a new sweep's base run
   * @param onOpenRun called with a run id to show that run in the history
   */
  constructor({ readBase, onOpenRun }) {
    this.readBase = readBase;
    this.onOpenRun = onOpenRun;
    this.sweeps = [];
    this.chosen = null;
    this.timer = null;
    this.charts = null; // {sweepId, objective, params: Map(name -> LineChart)}
    $("sweep-pick").addEventListener("change", (event) => {
      this.chosen = Number(event.target.value);
      this.#draw();
    });
    $("refresh-sweeps").addEventListener("click", () => this.refresh());
    $("sweep-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#start();
    });
    $("sweep-stop").addEventListener("click", () => this.#stop());
  }

  start() {
    guard($("sweep-start"), cannotUse());
    this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    try {
      this.sweeps = await api.listSweeps();
    } catch (err) {
      if (err.status !== 401) notify(`Cannot load the sweeps: ${err.message}`, "error");
      return;
    }
    if (!this.sweeps.some((s) => s.id === this.chosen)) this.chosen = this.sweeps.length ? this.sweeps[this.sweeps.length - 1].id : null;
    $("sweep-pick").replaceChildren(...this.sweeps.map((s) => {
      const option = el("option", "", `${s.name} (#${s.id})${s.running ? " – running" : ""}`);
      option.value = String(s.id);
      option.selected = s.id === this.chosen;
      return option;
    }));
    $("sweeps-empty").hidden = this.sweeps.length > 0;
    $("sweep-view").hidden = this.sweeps.length === 0;
    this.#draw();
    if (this.sweeps.some((s) => s.running)) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  #draw() {
    const sweep = this.sweeps.find((s) => s.id === this.chosen);
    if (!sweep) return;
    const counted = sweep.trials.filter((t) => COUNTED.has(t.state)).length;
    const best = sweep.best_run_id == null ? "no trial has completed yet"
      : `best: run #${sweep.best_run_id} (${sweep.metric} ${fmtNumber(sweep.best_value)})`;
    $("sweep-summary").textContent = `${sweep.running ? "Running" : "Not running"} · ${counted} of ${sweep.trials_budget} trials · `
      + `${sweep.direction} ${sweep.metric} · ${best}`;
    const stop = $("sweep-stop");
    stop.hidden = !sweep.running;
    guard(stop, this.#cannotStop(sweep));
    this.#table(sweep);
    this.#charts(sweep);
    this.#importances(sweep);
  }

  #cannotStop(sweep) {
    const me = signedIn();
    const refused = cannotUse();
    if (refused || !me || me.role === "admin" || (sweep.started_by ?? null) === me.owner) return refused;
    return `sweep ${sweep.name} was started by ${sweep.started_by ? `the key '${sweep.started_by}'` : "the server's own token"}; `
      + `the member key '${me.name}' stops only its own sweeps`;
  }

  #table(sweep) {
    const head = el("tr");
    for (const name of ["Trial", "State", sweep.metric, ...sweep.space, "Run"]) {
      const th = el("th", "", name);
      th.scope = "col";
      head.append(th);
    }
    const rows = sweep.trials.map((trial) => {
      const row = el("tr");
      row.dataset.trial = String(trial.trial);
      row.dataset.state = trial.state;
      const isBest = trial.run_id != null && trial.run_id === sweep.best_run_id;
      row.classList.toggle("is-best", isBest);
      const number = el("th", "", `#${trial.trial}`);
      number.scope = "row";
      if (isBest) number.append(" ", el("span", "best-tag", "best"));
      const badge = el("span", "badge", trial.state);
      badge.dataset.phase = STATE_PHASE[trial.state] || "running";
      const state = el("td");
      state.append(badge);
      row.append(number, state, el("td", "num", fmtNumber(trial.value)));
      for (const name of sweep.space) row.append(el("td", "num", shown(trial.params[name])));
      const open = el("td");
      if (trial.run_id != null) {
        open.append(button(`Run #${trial.run_id}`, "quiet", `Open run #${trial.run_id} of trial ${trial.trial} in the history`,
          () => this.onOpenRun(trial.run_id)));
      } else open.textContent = "–";
      row.append(open);
      return row;
    });
    const table = $("sweep-trials");
    table.querySelector("thead").replaceChildren(head);
    table.querySelector("tbody").replaceChildren(...rows);
  }

  /** The objective by trial, and each searched setting against it: complete and pruned trials apart. */
  #charts(sweep) {
    if (!this.charts || this.charts.sweepId !== sweep.id) {
      const box = $("sweep-charts");
      box.replaceChildren();
      const figure = (id, caption) => {
        const fig = el("figure", "chart-box");
        const chart = el("div", "chart");
        chart.id = id;
        fig.append(chart, el("figcaption", "visually-hidden", caption));
        box.append(fig);
        return chart;
      };
      const objective = new LineChart(figure("sweep-chart-objective", `${sweep.metric} by trial`),
        { title: `${sweep.metric} by trial`, xLabel: "trial", xFormat: (v) => (Number.isInteger(v) ? String(v) : ""), series: seriesOf() });
      const params = new Map(sweep.space.map((name) => [name, figure(`sweep-chart-${name}`, `${sweep.metric} against ${name}`)]));
      this.charts = { sweepId: sweep.id, objective, params, built: new Map() };
    }
    const valued = sweep.trials.filter((t) => typeof t.value === "number");
    this.charts.objective.setData(aligned(valued.map((t) => [t.trial, t])));
    for (const [name, container] of this.charts.params) {
      const pairs = valued.filter((t) => typeof t.params[name] === "number").map((t) => [t.params[name], t]);
      const xs = pairs.map((p) => p[0]);
      const xLog = xs.length > 1 && Math.min(...xs) > 0 && Math.max(...xs) / Math.min(...xs) > LOG_SPAN;
      const chart = this.charts.built.get(name);
      if (!chart || chart.options.xLog !== xLog) {  // the axis follows the values seen so far
        // A fresh element: the replaced chart keeps redrawing (theme changes) into its own, detached one.
        const fresh = el("div", "chart");
        fresh.id = container.id;
        container.replaceWith(fresh);
        this.charts.params.set(name, fresh);
        this.charts.built.set(name, new LineChart(fresh, { title: `${sweep.metric} against ${name}`, xLabel: name, xLog,
          ...(xLog ? { xFormat: (v) => (isPowerOf10(v) ? fmtNumber(v, 2) : "") } : {}), series: seriesOf() }));
      }
      this.charts.built.get(name).setData(aligned(pairs));
    }
  }

  #importances(sweep) {
    const list = $("sweep-importances");
    const entries = Object.entries(sweep.importances);
    $("sweep-importances-empty").hidden = entries.length > 0;
    list.replaceChildren(...entries.map(([name, weight]) => {
      const item = el("li");
      item.dataset.param = name;
      const meter = el("meter");
      meter.min = 0;
      meter.max = 1;
      meter.value = weight;
      meter.setAttribute("aria-label", `importance of ${name}`);
      item.append(el("span", "importance-name", name), meter, el("span", "num", fmtNumber(weight, 2)));
      return item;
    }));
  }

  async #start() {
    const error = $("sweep-error");
    error.textContent = "";
    if (cannotUse()) return;
    const { config, errors } = this.readBase();
    if (errors.length) {
      error.textContent = `The Configure form has errors (${errors.map((e) => e.field).join(", ")}): fix them first; its settings are the sweep's base run.`;
      return;
    }
    let search;
    try {
      search = loadYaml($("sweep-yaml").value) || {};
      if (typeof search !== "object" || Array.isArray(search)) throw new Error("it must be a mapping (name, space, objective, trials, …)");
    } catch (err) {
      error.textContent = `The search is not valid YAML: ${err.message}`;
      return;
    }
    const startButton = $("sweep-start");
    startButton.disabled = true;
    try {
      const answer = await api.startSweep({ ...search, base: config });
      notify(`Started sweep ${answer.name} (#${answer.id}).`);
      this.chosen = answer.id;
      await this.refresh();
    } catch (err) {
      error.textContent = err.fields.length ? err.fields.map((f) => `${f.field}: ${f.message}`).join("; ") : err.message;
    } finally {
      guard(startButton, cannotUse());
    }
  }

  async #stop() {
    const sweep = this.sweeps.find((s) => s.id === this.chosen);
    if (!sweep) return;
    try {
      await api.stopSweep(sweep.id);
      notify(`Stopping sweep ${sweep.name}: its running trials stop and save.`);
    } catch (err) {
      notify(`Cannot stop sweep ${sweep.name}: ${err.message}`, "error");
    }
    this.refresh();
  }
}

function seriesOf() {
  return [{ label: "complete", colorIndex: 0, style: "points" }, { label: "pruned", colorIndex: 4, style: "points" }];
}

/** [x, trial] pairs as uPlot's columns: x ascending, then the complete and the pruned trials' objective. */
function aligned(pairs) {
  const sorted = [...pairs].sort((a, b) => a[0] - b[0]);
  return [sorted.map((p) => p[0]),
    sorted.map(([, t]) => (t.state === "complete" ? t.value : null)),
    sorted.map(([, t]) => (t.state === "pruned" ? t.value : null))];
}

/** A log axis labels its decades only. */
function isPowerOf10(value) {
  return Math.abs(Math.log10(value) - Math.round(Math.log10(value))) < 1e-9;
}

function shown(value) {
  return typeof value === "number" ? fmtNumber(value) : value == null ? "–" : String(value);
}
