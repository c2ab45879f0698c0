/**
 * The "Current run" panel: phase, numbers, progress bar, live charts and the stop dialog.
 *
 * Which run it shows: the run that trains on the server now (GET /api/train/status, which
 * never names a queued run), or the one the person picked with ▶ in the queue panel
 * (`watch`), until they clear it. A run started from the page that waits in the queue
 * stays in the queue panel only: the panel keeps the run that trains.
 *
 * The panel reads the run's status first (numbers plus the histories so far), then opens
 * that run's own progress stream (progress-stream.js: one connection, a stream ticket,
 * backoff on reconnect), which replays every step after the last one held and then goes
 * live, leaving no gap. RunSeries merges by step, so a step that arrives twice is drawn
 * once. Between runs nothing streams, so the panel polls the status to notice a run
 * started elsewhere (CLI, API, another tab, the queue). The "Stopping…" notice follows
 * the run: it stays while the run winds down and goes when it has ended.
 * A resumed run's charts begin with the steps of the runs it continues (read once with
 * its history row), in a colour of their own, with a marker where it took over.
 */

import { api } from "./api.js";
import { LineChart } from "./charts.js";
import { evalNote } from "./eval-note.js";
import { SamplePlayer } from "./samples.js";
import { fmtDuration, fmtInt, fmtMemory, fmtNumber } from "./format.js";
import { notify } from "./notice.js";
import { ProgressStream } from "./progress-stream.js";
import { cannotManage, guard } from "./rights.js";
import { MOVING_AVERAGE_WINDOW, RunSeries } from "./run-series.js";

// cancelled: a queued run withdrawn before it started (it has no steps and never will).
const FINAL_PHASES = new Set(["completed", "stopped", "error", "cancelled"]);
const POLL_MS = { loading: 1500, idle: 5000 };

const STAT_FORMATS = {
  epoch: (v) => fmtNumber(v, 3),
  loss: (v) => fmtNumber(v),
  learning_rate: (v) => fmtNumber(v, 3),
  grad_norm: (v) => fmtNumber(v),
  eval_loss: (v) => fmtNumber(v),
  num_tokens: fmtInt,
  elapsed_seconds: fmtDuration,
  eta_seconds: fmtDuration,
  peak_memory_gb: fmtMemory,
  peak_memory_reserved_gb: fmtMemory,
  world_size: fmtInt,
};

// The fixed charts' series; a resumed run's charts add one for the runs it continues.
const CHART_SERIES = {
  loss: [
    { label: "loss", colorIndex: 0, style: "both", width: 1 },
    { label: `moving average (${MOVING_AVERAGE_WINDOW})`, colorIndex: 1, style: "line", width: 2.5 },
  ],
  learning_rate: [{ label: "learning rate", colorIndex: 2, style: "line" }],
  grad_norm: [{ label: "grad norm", colorIndex: 3, style: "line" }],
  eval_loss: [{ label: "eval loss", colorIndex: 4, style: "both" }],
};
const EARLIER_SERIES = { label: "before the resume", colorIndex: 7, style: "both", width: 1 };

const $ = (id) => document.getElementById(id);

export class RunPanel {
  /** @param onRunChanged called when a run appears or finishes (the history refreshes then) */
  constructor({ onRunChanged }) {
    this.onRunChanged = onRunChanged;
    this.series = new RunSeries();
    this.runId = null;
    this.watched = null; // a run picked with ▶ (shown until cleared); null: the run that trains now
    this.run = null; // the run's history row, once read: its owner decides who may stop or clear it
    this.phase = "idle";
    this.totalSteps = null;
    this.running = false;
    this.stream = null;
    this.endedRun = null; // the run whose stream has said it ended: it is not opened again
    this.dismissStopNotice = null;
    this.pollTimer = null;
    this.refreshes = 0;
    this.drawPending = false;
    this.charts = {
      loss: new LineChart($("chart-loss"), { title: "Loss", series: CHART_SERIES.loss }),
      learning_rate: new LineChart($("chart-learning_rate"), { title: "Learning rate", series: CHART_SERIES.learning_rate }),
      grad_norm: new LineChart($("chart-grad_norm"), { title: "Gradient norm", series: CHART_SERIES.grad_norm }),
      eval_loss: new LineChart($("chart-eval_loss"), { title: "Eval loss", series: CHART_SERIES.eval_loss }),
      extra: new LineChart($("chart-extra"), { title: "", series: [{ label: "", colorIndex: 5, style: "both" }] }),
    };
    this.earlierShown = {}; // the charts that carry a series of the runs this one continues
    this.extraShown = null; // the extra series in the chart; the selector picks another
    this.samples = new SamplePlayer($("sample-box"), $("sample-audio"), $("sample-caption"));
    $("extra-series").addEventListener("change", () => this.#drawSoon());
    $("stop-run").addEventListener("click", () => this.#askStop());
    $("clear-run").addEventListener("click", () => this.#clear());
  }

  start() {
    return this.refresh();
  }

  /** A run was just started (or resumed) from this page. One that waits in the queue is
   * the queue panel's to show: the run panel keeps the run that trains. */
  async follow(answer) {
    if (answer.queued) return;
    this.watched = null;
    await this.refresh();
    document.getElementById("current-run").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  /** Show `runId` (▶ in the queue panel) until the person clears it or picks another. */
  async watch(runId) {
    this.watched = runId;
    this.#adoptRun(runId);
    await this.refresh();
    document.getElementById("current-run").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  async refresh() {
    clearTimeout(this.pollTimer);
    // Answers can overtake each other; only the newest request's answer is shown.
    const asked = ++this.refreshes;
    let status;
    try {
      status = this.watched === null ? await api.status() : await api.runStatus(this.watched);
    } catch (err) {
      if (asked !== this.refreshes) return;
      if (err.status === 404 && this.watched !== null) {
        this.watched = null; // the picked run was deleted: back to the run that trains
        this.refresh();
      } else if (err.status !== 401) {
        this.#schedulePoll(POLL_MS.idle);
      }
      return;
    }
    if (asked !== this.refreshes) return;
    const runId = status.run_id ?? status.job_id ?? null;
    this.#adoptRun(runId);
    this.series.addHistories(status.histories);
    const wasRunning = this.running;
    this.#showStatus(status);
    this.#drawSoon();
    // A run's stream is opened once: one opened after its end would only say so again,
    // and again, as fast as the server can answer.
    const live = this.running && this.endedRun !== runId;
    if (live && !this.stream) this.#openStream();
    if (!live) this.#closeStream();
    if (wasRunning && !this.running) this.onRunChanged();
    // While training, the stream brings every step and its `status` events bring the
    // stage changes, so polling then would only repeat what the stream already said.
    if (!this.running) this.#schedulePoll(POLL_MS.idle);
    else if (status.phase !== "training") this.#schedulePoll(POLL_MS.loading);
  }

  /** Show `runId` from now on (its stream is opened once its status says it runs). */
  #adoptRun(runId) {
    if (runId === this.runId) return;
    this.#closeStream();
    this.#endStopNotice();
    this.runId = runId;
    $("current-run").dataset.runId = runId === null ? "" : String(runId);
    this.run = null;
    this.series.clear();
    this.totalSteps = null;
    this.#drawSoon();
    this.#showName(runId);
    if (runId !== null) this.onRunChanged();
  }

  /** The status has no run name nor owner; the history has, so ask it once per run. */
  async #showName(runId) {
    $("run-name").textContent = runId === null ? "" : `Run #${runId}`;
    this.#showLineage();
    if (runId === null) return;
    try {
      const run = await api.getRun(runId);
      if (this.runId !== runId) return;
      this.run = run;
      this.series.setEarlier(run.earlier_runs);
      this.#showLineage();
      this.#drawSoon();
      this.#showPhase(this.phase);
      this.#drawSoon(); // the eval chart's note reads the run's config
      if (run.display_name) $("run-name").textContent = `${run.display_name} (#${runId})`;
    } catch {
      // The number alone is still a fine name; a deleted run is not worth a message.
    }
  }

  /** Where a resumed run's curve begins, in words beside its name. */
  #showLineage() {
    const line = $("run-lineage");
    const markers = this.series.markers;
    line.textContent = markers.length ? `${markers.map((m) => m.label[0].toUpperCase() + m.label.slice(1)).join("; ")}: the earlier steps are drawn before the marker.` : "";
    line.hidden = !markers.length;
  }

  #schedulePoll(ms) {
    clearTimeout(this.pollTimer);
    this.pollTimer = setTimeout(() => this.refresh(), ms);
  }

  #openStream() {
    const runId = this.runId;
    this.stream = new ProgressStream(runId, () => this.series.lastStep, {
      progress: (event) => this.#onProgress(event),
      status: () => this.refresh(),
      end: () => {
        this.stream = null;
        this.endedRun = runId;
        this.refresh();
      },
      lost: () => { this.stream = null; this.refresh(); },
      state: (text) => this.#streamState(text),
    }).open();
  }

  #closeStream() {
    if (!this.stream) return;
    this.stream.close();
    this.stream = null;
    this.#streamState("");
  }

  #streamState(text) {
    $("stream-state").textContent = text;
  }

  #onProgress(event) {
    this.series.addProgress(event);
    if (!this.running || this.phase !== "training") {
      this.running = true;
      this.phase = "training";
      this.#showPhase("training");
    }
    this.#showNumbers(event);
    this.#drawSoon();
  }

  #showStatus(status) {
    this.phase = status.phase;
    // /api/train/status's flag says whether anything trains here: with two GPUs busy, the
    // run it shows may have ended while the other trains on. Ended is ended.
    this.running = Boolean(status.is_training_running) && !FINAL_PHASES.has(status.phase);
    if (!this.running) this.#endStopNotice();
    this.#showPhase(status.phase);
    this.#showNumbers(status);
    const modality = $("run-modality");
    modality.textContent = status.modality || "";
    modality.hidden = !status.modality;
    this.samples.follow(this.runId, status.modality, this.running);
    // A failed run's message repeats its error; say it once, in the error box.
    $("run-message").textContent = status.message && status.message !== status.error ? status.message : "";
    const error = $("run-error");
    error.hidden = !status.error;
    error.textContent = status.error || "";
  }

  #showPhase(phase) {
    const badge = $("run-phase");
    badge.dataset.phase = phase;
    badge.textContent = phase.replace(/_/g, " ");
    // Stopping or clearing another key's run is its owner's (or an admin's): disabled, saying why.
    const refused = this.runId === null ? null : cannotManage(this.run);
    guard($("stop-run"), refused, !this.running);
    guard($("clear-run"), refused);
    $("clear-run").hidden = !FINAL_PHASES.has(phase);
  }

  #showNumbers(data) {
    for (const [key, format] of Object.entries(STAT_FORMATS)) {
      if (key in data) $(`stat-${key}`).textContent = format(data[key]);
    }
    // The last progress event's estimate means nothing once the run is over.
    if (FINAL_PHASES.has(this.phase)) $("stat-eta_seconds").textContent = fmtDuration(null);
    const step = data.step ?? 0;
    const total = data.total_steps;
    if (Number.isFinite(total)) this.totalSteps = total;
    const bar = $("run-progress");
    if (Number.isFinite(total) && total > 0) {
      bar.max = total;
      bar.value = Math.min(step, total);
      $("run-steps").textContent = `Step ${fmtInt(step)} of ${fmtInt(total)}`;
    } else if (this.runId === null || FINAL_PHASES.has(this.phase)) {
      bar.max = 1;
      bar.value = 0;
      $("run-steps").textContent = this.runId === null ? "No run yet" : step ? `Step ${fmtInt(step)}` : "No steps ran";
    } else {
      bar.removeAttribute("value");
      $("run-steps").textContent = step ? `Step ${fmtInt(step)}` : "Preparing…";
    }
  }

  /** Redraw at most once per frame, however fast steps arrive. */
  #drawSoon() {
    if (this.drawPending) return;
    this.drawPending = true;
    requestAnimationFrame(() => {
      this.drawPending = false;
      const data = { loss: this.series.lossWithAverage() };
      for (const name of ["learning_rate", "grad_norm", "eval_loss"]) data[name] = this.series.withEarlier(name);
      for (const [name, values] of Object.entries(data)) {
        const chart = this.charts[name];
        const earlier = this.series.hasEarlier(name);
        if (earlier !== Boolean(this.earlierShown[name])) chart.setSeries([...CHART_SERIES[name], ...(earlier ? [EARLIER_SERIES] : [])], values);
        else chart.setData(values);
        this.earlierShown[name] = earlier;
        chart.setMarkers(this.series.markers);
      }
      this.#showEvalNote();
      this.#drawExtra();
    });
  }

  /** An empty eval chart says why: evaluation is off (and which fields turn it on), or when it comes. */
  #showEvalNote() {
    const chart = $("chart-eval_loss");
    const empty = this.series.series("eval_loss")[0].length === 0;
    const text = empty && this.runId !== null ? evalNote(this.run?.config, this.totalSteps) : "";
    const note = $("eval-note");
    note.textContent = text;
    note.hidden = !text;
    chart.classList.toggle("has-note", Boolean(text));
  }

  /** The metrics a method logs beyond the fixed ones (token accuracy, nDCG@10, reward
   * margins...): one chart, with a selector of every series the run has so far. */
  #drawExtra() {
    const names = this.series.extraNames();
    const select = $("extra-series");
    if (names.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
      const keep = select.value;
      select.replaceChildren(...names.map((name) => new Option(name, name)));
      if (names.includes(keep)) select.value = keep;
    }
    $("extra-chart-box").hidden = names.length === 0;
    const name = select.value;
    const data = this.series.extraSeries(name);
    const earlier = this.series.hasEarlier(name);
    const shown = `${name}\n${earlier}`;
    if (shown !== this.extraShown) {
      this.extraShown = shown;
      const series = [{ label: name.replace(/_/g, " "), colorIndex: 5, style: "both" }, ...(earlier ? [EARLIER_SERIES] : [])];
      this.charts.extra.setSeries(series, data);
    } else {
      this.charts.extra.setData(data);
    }
    this.charts.extra.setMarkers(this.series.markers);
  }

  #askStop() {
    const dialog = $("stop-dialog");
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      const choice = dialog.returnValue;
      if (choice !== "save" && choice !== "cancel") return;
      try {
        await api.stopRun(this.runId, choice === "save");
        this.#endStopNotice();
        // A quick stop can end before this answer arrives: the stream has then said
        // so already, and a sticky notice raised now would outlive the run for good.
        if (this.running) {
          const message = choice === "save" ? "Stopping at the next step and saving a checkpoint…" : "Cancelling the run…";
          this.dismissStopNotice = notify(message, "info", { sticky: true });
        }
      } catch (err) {
        notify(`Stop refused: ${err.message}`, "error");
      }
      this.refresh();
    }, { once: true });
  }

  #endStopNotice() {
    if (!this.dismissStopNotice) return;
    this.dismissStopNotice();
    this.dismissStopNotice = null;
  }

  /** A picked run goes back to the run that trains; the server's own ended run is reset to idle. */
  async #clear() {
    if (this.watched !== null) {
      this.watched = null;
    } else {
      try {
        await api.reset();
      } catch (err) {
        notify(`Cannot clear: ${err.message}`, "error");
        return;
      }
    }
    this.#adoptRun(null);
    await this.refresh();
  }
}
