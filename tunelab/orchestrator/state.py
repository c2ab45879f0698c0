"""The live progress of one run as the parent sees it: phase, latest numbers, histories.

Only the run's own thread of control writes here (under the run's lock); readers get
copies. Values come from parsed events, where non-finite numbers are already None: a
None is shown as null and never replaced by an older good value, and it is left out of
the chart histories. Two progress events for the same step (HF logs training and eval
numbers separately) merge, like the store's upsert does.
"""

from __future__ import annotations

from typing import Any

PHASES = ("idle", "loading_model", "loading_dataset", "configuring", "training", "finalizing",
          "completed", "stopped", "error")
FINAL_PHASES = frozenset({"completed", "stopped", "error"})
# Worker `status.stage` -> phase. Tokenizing is part of getting the data ready; saving
# and exporting (export_after) are the run wrapping up.
STAGE_TO_PHASE = {
    "loading_model": "loading_model",
    "loading_dataset": "loading_dataset",
    "formatting": "loading_dataset",
    "configuring": "configuring",
    "training": "training",
    "saving": "finalizing",
    "exporting": "finalizing",
}
LIVE_NUMBERS = ("total_steps", "epoch", "loss", "learning_rate", "grad_norm", "eval_loss", "num_tokens",
                "elapsed_seconds", "eta_seconds", "peak_memory_gb", "peak_memory_reserved_gb")
METRIC_COLUMNS = ("step", "loss", "learning_rate", "grad_norm", "eval_loss", "epoch", "num_tokens", "elapsed_seconds")
HISTORY_KEYS = ("steps", "loss", "learning_rate", "grad_norm_steps", "grad_norm", "eval_steps", "eval_loss")
# Distinct extra series one run keeps for its live charts; a worker inventing a new name
# every step must not grow the parent's memory without bound (the store keeps them all).
MAX_EXTRA_SERIES = 64


class ProgressState:
    def __init__(self) -> None:
        self.phase = "idle"
        self.step: int | None = None
        self.numbers: dict[str, Any] = dict.fromkeys(LIVE_NUMBERS)
        self.message = ""
        self.error: str | None = None
        self.output_dir: str | None = None
        self.modality: str | None = None  # events.MODALITIES; None until the worker says
        self.status: str | None = None  # the stored run status once finalized
        self.resume_blocked = False
        self.malformed_events = 0
        self.history: dict[str, list] = {key: [] for key in HISTORY_KEYS}
        self.extra: dict[str, float] = {}  # the latest value of each extra metric
        self.extra_history: dict[str, dict[str, list]] = {}  # name -> {"steps", "values"}

    def apply_progress(self, event: dict[str, Any]) -> dict[str, Any]:
        """Take one parsed progress event; return the metric row to store for it."""
        step = event["step"]
        same_step = step == self.step
        for key in LIVE_NUMBERS:
            value = event.get(key)
            if value is not None or not same_step:
                self.numbers[key] = value
        self.step = step
        if self.phase not in FINAL_PHASES:
            self.phase = "training"
        if event.get("loss") is not None:
            self._record("steps", step, loss=event["loss"], learning_rate=event.get("learning_rate"))
        if event.get("grad_norm") is not None:
            self._record("grad_norm_steps", step, grad_norm=event["grad_norm"])
        if event.get("eval_loss") is not None:
            self._record("eval_steps", step, eval_loss=event["eval_loss"])
        extra = event.get("extra") or {}
        for name, value in extra.items():
            self._record_extra(name, step, value)
        return {**{key: event.get(key) for key in METRIC_COLUMNS}, "extra": dict(extra)}

    def _record_extra(self, name: str, step: int, value: float) -> None:
        series = self.extra_history.get(name)
        if series is None:
            if len(self.extra_history) >= MAX_EXTRA_SERIES:
                return
            series = self.extra_history[name] = {"steps": [], "values": []}
        self.extra[name] = value
        if series["steps"] and series["steps"][-1] == step:
            series["values"][-1] = value
        else:
            series["steps"].append(step)
            series["values"].append(value)

    def _record(self, steps_key: str, step: int, **values: Any) -> None:
        """Append a point to a history (or overwrite it when the step repeats).

        `learning_rate` shares the loss's steps, so it may hold a None: dropping it would
        misalign the two series."""
        steps = self.history[steps_key]
        if steps and steps[-1] == step:
            for key, value in values.items():
                self.history[key][-1] = value
            return
        steps.append(step)
        for key, value in values.items():
            self.history[key].append(value)

    def histories(self) -> dict[str, Any]:
        """The chart series: HISTORY_KEYS, plus `extra` {name: {"steps", "values"}}."""
        return {**{key: list(values) for key, values in self.history.items()},
                "extra": {name: {k: list(v) for k, v in series.items()} for name, series in self.extra_history.items()}}

    def finite_losses(self) -> list[float]:
        return list(self.history["loss"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            **self.numbers,
            "extra": dict(self.extra),
            "message": self.message,
            "error": self.error,
            "output_dir": self.output_dir,
            "modality": self.modality,
            "status": self.status,
            "resume_blocked": self.resume_blocked,
            "malformed_events": self.malformed_events,
            "histories": self.histories(),
        }
