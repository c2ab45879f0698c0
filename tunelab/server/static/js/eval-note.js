/**
 * What the empty eval-loss chart says instead of a bare "No data yet": a run whose config
 * has evaluation off names the form fields that turn it on (their labels come from
 * the form's field table, so the words match the form); a run that evaluates but has not yet
 * says at which step the first evaluation comes. The worker's rule is the one used here:
 * `eval_steps` 0 is off, N >= 1 every N steps, below 1 that share of all steps, rounded up
 * (worker/trainer_setup.py, worker/backends/mlx/train.py); where the eval rows come from (a split, eval
 * files, or held-out training rows) never turns evaluation on by itself.
 */

import { fieldLabel as label } from "./config-fields.js";
import { fmtInt } from "./format.js";

/** The first step that evaluates, or null while the run's length is unknown. */
export function firstEvalStep(evalSteps, totalSteps) {
  if (evalSteps >= 1) return Math.floor(evalSteps);
  return Number.isFinite(totalSteps) && totalSteps > 0 ? Math.max(1, Math.ceil(evalSteps * totalSteps)) : null;
}

/**
 * The note for a run's empty eval chart, or "" when there is nothing to add.
 * @param config the run's stored RunConfig (null while it is being read)
 * @param totalSteps the run's planned steps, if known
 */
export function evalNote(config, totalSteps) {
  if (!config) return "";
  const every = Number(config.eval_steps) || 0;
  if (every <= 0) {
    return `Evaluation is off for this run (${label("eval_steps")} is 0). To measure an eval loss, set ${label("eval_steps")} `
      + `(Advanced settings, Evaluation) to a number of steps; the eval rows come from ${label("local_eval_datasets")}, the dataset's `
      + `${label("eval_split")}, or else a share of the training rows held out (${label("eval_holdout")}).`;
  }
  const first = firstEvalStep(every, totalSteps);
  if (first === null) return `The first evaluation comes after ${Math.round(every * 100)}% of the steps.`;
  if (totalSteps > 0 && first > totalSteps) {
    return `No evaluation comes in this run: ${label("eval_steps")} is ${fmtInt(first)} steps and the run has ${fmtInt(totalSteps)}.`;
  }
  return `The first evaluation comes at step ${fmtInt(first)}.`;
}
