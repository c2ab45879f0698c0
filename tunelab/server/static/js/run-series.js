/**
 * The metric series of the run on screen, keyed by step.
 *
 * Points arrive from two places that overlap: the histories in `/api/train/status`
 * (after a reload) and `progress` events from the SSE stream. Keying every series by
 * step makes the merge order-free: a step seen twice is one point, and a step missing
 * from one source is filled by the other, so the charts have no gaps and no doubles.
 *
 * A resumed run's own steps begin after the step it resumed from; the steps before it
 * belong to the runs it continues (the run detail's `earlier_runs`). They are kept apart
 * (`setEarlier`), so a chart can draw them in a colour of their own, with a marker at
 * each resume point, and the moving average runs over the whole curve.
 */

export const MOVING_AVERAGE_WINDOW = 10;

const SERIES = ["loss", "learning_rate", "grad_norm", "eval_loss"];

const isNumber = (v) => typeof v === "number" && Number.isFinite(v);

export class RunSeries {
  constructor() {
    this.clear();
  }

  clear() {
    this.points = Object.fromEntries(SERIES.map((name) => [name, new Map()]));
    this.extra = new Map(); // name -> Map(step -> value): what the method logs beyond the fixed series
    this.lastStep = null;
    this.setEarlier([]);
  }

  /** The runs this one continues, oldest first: `earlier_runs` of the run detail. */
  setEarlier(parts) {
    this.earlier = Object.fromEntries(SERIES.map((name) => [name, new Map()]));
    this.earlierExtra = new Map();
    this.markers = [];
    for (const part of parts || []) {
      const m = part.metrics || {};
      for (const name of SERIES) pairUp(this.earlier[name], m.steps, m[name]);
      for (const [name, series] of Object.entries(m.extra || {})) {
        if (!this.earlierExtra.has(name)) this.earlierExtra.set(name, new Map());
        pairUp(this.earlierExtra.get(name), series.steps, series.values);
      }
      if (Number.isInteger(part.until_step)) this.markers.push({ step: part.until_step, label: resumeLabel(part) });
    }
  }

  /** Whether earlier runs logged series `name` (the loss, the learning rate, an extra one...). */
  hasEarlier(name) {
    const points = SERIES.includes(name) ? this.earlier[name] : this.earlierExtra.get(name);
    return Boolean(points && points.size > 0);
  }

  /** Merge the histories object of a status or metrics answer. */
  addHistories(h) {
    if (!h) return;
    pairUp(this.points.loss, h.steps, h.loss);
    pairUp(this.points.learning_rate, h.steps, h.learning_rate);
    pairUp(this.points.grad_norm, h.grad_norm_steps, h.grad_norm);
    pairUp(this.points.eval_loss, h.eval_steps, h.eval_loss);
    for (const [name, series] of Object.entries(h.extra || {})) pairUp(this.#extraPoints(name), series.steps, series.values);
    const steps = [...(h.steps || []), ...(h.grad_norm_steps || []), ...(h.eval_steps || [])];
    for (const step of steps) this.#seen(step);
  }

  /** Merge one progress event; null values (unknown or non-finite) add no point. */
  addProgress(event) {
    const step = event.step;
    if (!Number.isInteger(step)) return;
    for (const name of SERIES) if (isNumber(event[name])) this.points[name].set(step, event[name]);
    for (const [name, value] of Object.entries(event.extra || {})) if (isNumber(value)) this.#extraPoints(name).set(step, value);
    this.#seen(step);
  }

  #seen(step) {
    if (this.lastStep === null || step > this.lastStep) this.lastStep = step;
  }

  #extraPoints(name) {
    if (!this.extra.has(name)) this.extra.set(name, new Map());
    return this.extra.get(name);
  }

  /** [steps, values] of one series in step order. */
  series(name) {
    return inStepOrder(this.points[name]);
  }

  /** The names of the extra series seen so far (this run's or earlier runs'), sorted. */
  extraNames() {
    return [...new Set([...this.extra.keys(), ...this.earlierExtra.keys()])].sort();
  }

  /** [steps, values] of one extra series (empty when unknown), with earlier runs' values
   * as a third column when they logged it. */
  extraSeries(name) {
    const own = this.extra.get(name) || new Map();
    return this.hasEarlier(name) ? joined(own, this.earlierExtra.get(name)) : inStepOrder(own);
  }

  /** Chart data of one series: [steps, this run's values] and, with earlier runs,
   * their values as a third column (each column null at the other's steps). */
  withEarlier(name) {
    return this.hasEarlier(name) ? joined(this.points[name], this.earlier[name]) : this.series(name);
  }

  /** Loss data for a chart: [steps, raw loss, trailing moving average] and, with earlier
   * runs, their loss as a fourth column; the average runs over the whole curve. */
  lossWithAverage() {
    if (!this.hasEarlier("loss")) {
      const [steps, loss] = this.series("loss");
      return [steps, loss, movingAverage(loss, MOVING_AVERAGE_WINDOW)];
    }
    const [steps, own, before] = this.withEarlier("loss");
    const whole = steps.map((_, i) => own[i] ?? before[i]);
    const known = whole.map((v, i) => [v, i]).filter(([v]) => isNumber(v));
    const average = steps.map(() => null);
    movingAverage(known.map(([v]) => v), MOVING_AVERAGE_WINDOW).forEach((v, j) => { average[known[j][1]] = v; });
    return [steps, own, average, before];
  }
}

/** "resumed from Run #3 at step 40": what a marker at a resume point says. */
export function resumeLabel(part) {
  return `resumed from Run #${part.run_id} at step ${part.until_step}`;
}

/** [steps, this run's values, earlier runs' values], each null at the other's steps. */
function joined(own, before) {
  const steps = [...new Set([...before.keys(), ...own.keys()])].sort((a, b) => a - b);
  return [steps, steps.map((s) => own.get(s) ?? null), steps.map((s) => (own.has(s) ? null : before.get(s) ?? null))];
}

function inStepOrder(points) {
  const entries = [...points.entries()].sort((a, b) => a[0] - b[0]);
  return [entries.map((e) => e[0]), entries.map((e) => e[1])];
}

function pairUp(target, steps, values) {
  if (!Array.isArray(steps) || !Array.isArray(values)) return;
  const n = Math.min(steps.length, values.length);
  for (let i = 0; i < n; i++) if (Number.isInteger(steps[i]) && isNumber(values[i])) target.set(steps[i], values[i]);
}

/** Mean of the last `window` values at each point (fewer at the start). */
export function movingAverage(values, window) {
  const out = [];
  let sum = 0;
  for (let i = 0; i < values.length; i++) {
    sum += values[i];
    if (i >= window) sum -= values[i - window];
    out.push(sum / Math.min(i + 1, window));
  }
  return out;
}
