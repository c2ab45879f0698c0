/**
 * The "Current run" panel: phase, numbers, progress bar, live charts and the stop dialog.
 *
 * The server's progress stream follows one run and closes after its end. So the panel
 * reads the status snapshot first (numbers plus the histories so far), then opens the
 * stream with `last_event_id` = `<run>:<last step it holds>`: the server replays every
 * step after it and then goes live, leaving no gap. If the connection drops, EventSource
 * reconnects by itself and sends Last-Event-ID (the last `<run>:<step>` id it got). RunSeries merges by step, so a step
 * that arrives twice is drawn once. Between runs nothing streams, so the panel polls
 * the status to notice a run started elsewhere (CLI, API, another tab). The "Stopping…"
 * notice follows the run: it stays while the run winds down and goes when it has ended.
 */

import { api } from "./api.js";
import { LineChart } from "./charts.js";
import { evalNote } from "./eval-note.js";
import { SamplePlayer } from "./samples.js";
import { fmtDuration, fmtInt, fmtMemory, fmtNumber } from "./format.js";
import { notify } from "./notice.js";
import { cannotManage, guard } from "./rights.js";
import { MOVING_AVERAGE_WINDOW, RunSeries } from "./run-series.js";

const FINAL_PHASES = new Set(["completed", "stopped", "error"]);
const POLL_MS = { loading: 1500, idle: 5000 };
const STREAM_RETRY_MS = 3000;

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

const $ = (id) => document.getElementById(id);

export class RunPanel {
  /** @param onRunChanged called when a run appears or finishes (the history refreshes then) */
  constructor({ onRunChanged }) {
    this.onRunChanged = onRunChanged;
    this.series = new RunSeries();
    this.runId = null;
    this.run = null; // the run's history row, once read: its owner decides who may stop or clear it
    this.phase = "idle";
    this.totalSteps = null;
    this.running = false;
    this.stream = null;
    this.dismissStopNotice = null;
    this.pollTimer = null;
    this.refreshes = 0;
    this.drawPending = false;
    this.charts = {
      loss: new LineChart($("chart-loss"), {
        title: "Loss",
        series: [
          { label: "loss", colorIndex: 0, style: "both", width: 1 },
          { label: `moving average (${MOVING_AVERAGE_WINDOW})`, colorIndex: 1, style: "line", width: 2.5 },
        ],
      }),
      learning_rate: new LineChart($("chart-learning_rate"), { title: "Learning rate", series: [{ label: "learning rate", colorIndex: 2, style: "line" }] }),
      grad_norm: new LineChart($("chart-grad_norm"), { title: "Gradient norm", series: [{ label: "grad norm", colorIndex: 3, style: "line" }] }),
      eval_loss: new LineChart($("chart-eval_loss"), { title: "Eval loss", series: [{ label: "eval loss", colorIndex: 4, style: "both" }] }),
      extra: new LineChart($("chart-extra"), { title: "", series: [{ label: "", colorIndex: 5, style: "both" }] }),
    };
    this.extraShown = null; // the extra series in the chart; the selector picks another
    this.samples = new SamplePlayer($("sample-box"), $("sample-audio"), $("sample-caption"));
    $("extra-series").addEventListener("change", () => this.#drawSoon());
    $("stop-run").addEventListener("click", () => this.#askStop());
    $("clear-run").addEventListener("click", () => this.#clear());
  }

  start() {
    return this.refresh();
  }

  /** A run was just started from this page. */
  async follow(jobId) {
    this.#adoptRun(jobId);
    await this.refresh();
    document.getElementById("current-run").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  async refresh() {
    clearTimeout(this.pollTimer);
    // Answers can overtake each other; only the newest request's answer is shown.
    const asked = ++this.refreshes;
    let status;
    try {
      status = await api.status();
    } catch (err) {
      if (err.status !== 401 && asked === this.refreshes) this.#schedulePoll(POLL_MS.idle);
      return;
    }
    if (asked !== this.refreshes) return;
    const runId = status.run_id ?? status.job_id ?? null;
    this.#adoptRun(runId);
    this.series.addHistories(status.histories);
    const wasRunning = this.running;
    this.#showStatus(status);
    this.#drawSoon();
    if (this.running && !this.stream) this.#openStream();
    if (!this.running) this.#closeStream();
    if (wasRunning && !this.running) this.onRunChanged();
    // While training, the stream brings every step and its `status` events bring the
    // stage changes, so polling then would only repeat what the stream already said.
    if (!this.running) this.#schedulePoll(POLL_MS.idle);
    else if (status.phase !== "training") this.#schedulePoll(POLL_MS.loading);
  }

  /** Show `runId` from now on; `keepStream` when the open stream already follows it. */
  #adoptRun(runId, keepStream = false) {
    if (runId === this.runId) return;
    if (!keepStream) this.#closeStream();
    this.#endStopNotice();
    this.runId = runId;
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
    if (runId === null) return;
    try {
      const run = await api.getRun(runId);
      if (this.runId !== runId) return;
      this.run = run;
      this.#showPhase(this.phase);
      this.#drawSoon(); // the eval chart's note reads the run's config
      if (run.display_name) $("run-name").textContent = `${run.display_name} (#${runId})`;
    } catch {
      // The number alone is still a fine name; a deleted run is not worth a message.
    }
  }

  #schedulePoll(ms) {
    clearTimeout(this.pollTimer);
    this.pollTimer = setTimeout(() => this.refresh(), ms);
  }

  #openStream() {
    const stream = new EventSource(api.progressUrl(this.runId, this.series.lastStep));
    this.stream = stream;
    stream.addEventListener("open", () => this.#streamState(""));
    stream.addEventListener("progress", (e) => this.#onProgress(JSON.parse(e.data)));
    stream.addEventListener("status", () => this.refresh());
    stream.addEventListener("complete", () => this.#onEnd(stream));
    stream.addEventListener("error", (e) => {
      // A named `error` event (with data) is the run failing; a bare one is the
      // connection. EventSource retries a dropped connection itself, sending
      // Last-Event-ID, but gives up on an answer it cannot use (e.g. 401).
      if (e.data) {
        this.#onEnd(stream);
      } else if (stream.readyState === EventSource.CLOSED) {
        this.#streamState("Live updates lost; retrying…");
        if (this.stream === stream) this.stream = null;
        setTimeout(() => this.refresh(), STREAM_RETRY_MS);
      } else {
        this.#streamState("Live updates interrupted; reconnecting…");
      }
    });
  }

  #closeStream() {
    if (!this.stream) return;
    this.stream.close();
    this.stream = null;
    this.#streamState("");
  }

  /** The run ended: the server closes the stream now, so close it here before EventSource reconnects. */
  #onEnd(stream) {
    if (this.stream === stream) this.#closeStream();
    this.refresh();
  }

  #streamState(text) {
    $("stream-state").textContent = text;
  }

  #onProgress(event) {
    const runId = event.run_id ?? event.job_id;
    if (runId !== undefined && runId !== null && runId !== this.runId) {
      // A newer run than the one on screen (the connection came back after a run
      // ended and another began): switch to it and read its whole history.
      this.#adoptRun(runId, true);
      this.refresh();
    }
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
    this.running = Boolean(status.is_training_running);
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
      this.charts.loss.setData(this.series.lossWithAverage());
      for (const name of ["learning_rate", "grad_norm", "eval_loss"]) this.charts[name].setData(this.series.series(name));
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
    if (name !== this.extraShown) {
      this.extraShown = name;
      this.charts.extra.setSeries([{ label: name.replace(/_/g, " "), colorIndex: 5, style: "both" }], data);
    } else {
      this.charts.extra.setData(data);
    }
  }

  #askStop() {
    const dialog = $("stop-dialog");
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      const choice = dialog.returnValue;
      if (choice !== "save" && choice !== "cancel") return;
      try {
        await api.stop(choice === "save", this.runId);
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

  async #clear() {
    try {
      await api.reset();
    } catch (err) {
      notify(`Cannot clear: ${err.message}`, "error");
      return;
    }
    this.#adoptRun(null);
    await this.refresh();
  }
}
