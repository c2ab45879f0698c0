/**
 * Comparing runs: the loss curves of two or more runs from the history, overlaid on one
 * chart by step, raw or smoothed with the same moving average as the live chart. A
 * resumed run's curve is whole: it begins with the steps of the runs it continues
 * (`earlier_runs` of its detail), with a marker where it took over.
 */

import { api } from "./api.js";
import { LineChart } from "./charts.js";
import { notify } from "./notice.js";
import { runName } from "./history.js";
import { MOVING_AVERAGE_WINDOW, movingAverage, resumeLabel } from "./run-series.js";

const $ = (id) => document.getElementById(id);

export class ComparePanel {
  constructor() {
    this.runs = [];
    this.chart = null;
    $("compare-close").addEventListener("click", () => this.close());
    $("compare-smooth").addEventListener("change", () => this.#draw());
  }

  async show(ids) {
    let runs;
    try {
      runs = await Promise.all(ids.map((id) => api.getRun(id)));
    } catch (err) {
      notify(`Cannot compare: ${err.message}`, "error");
      return;
    }
    this.runs = runs;
    const box = $("compare");
    box.hidden = false;
    $("compare-title").textContent = `Loss compared: ${runs.map((run) => `${runName(run)} (#${run.id})`).join(", ")}`;
    // Created on first show: uPlot measures its container, which is hidden until now.
    this.chart ||= new LineChart($("chart-compare"), { title: "Loss by step", series: [] });
    this.#draw();
    box.scrollIntoView({ behavior: "smooth", block: "nearest" });
    $("compare-close").focus({ preventScroll: true });
  }

  close() {
    $("compare").hidden = true;
    $("compare-runs").focus();
  }

  /** One x axis (every step any run has) and one series per run, null where a run has no loss. */
  #draw() {
    const smooth = $("compare-smooth").checked;
    const curves = this.runs.map((run) => {
      const parts = [...(run.earlier_runs || []).map((part) => part.metrics), run.metrics];
      const pairs = parts
        .flatMap((m) => m.steps.map((step, i) => [step, m.loss[i]]))
        .filter(([, loss]) => typeof loss === "number");
      const raw = pairs.map((p) => p[1]);
      const values = smooth ? movingAverage(raw, MOVING_AVERAGE_WINDOW) : raw;
      return new Map(pairs.map((p, i) => [p[0], values[i]]));
    });
    const steps = [...new Set(curves.flatMap((c) => [...c.keys()]))].sort((a, b) => a - b);
    const data = [steps, ...curves.map((curve) => steps.map((s) => (curve.has(s) ? curve.get(s) : null)))];
    const series = this.runs.map((run, i) => ({ label: `${runName(run)} (#${run.id})`, colorIndex: i, style: smooth ? "line" : "both", width: 1.5 }));
    this.chart.setSeries(series, data);
    this.chart.setMarkers(this.runs.flatMap((run) => (run.earlier_runs || [])
      .filter((part) => Number.isInteger(part.until_step))
      .map((part) => ({ step: part.until_step, label: `#${run.id} ${resumeLabel(part)}` }))));
  }
}
