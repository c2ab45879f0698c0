"""Driving a sweep: ask Optuna for a trial, start it as an ordinary run, feed the pruner
the run's objective as it streams in, and tell Optuna how the trial ended.

Every trial goes through `Orchestrator.start`, so it is checked, placed on its devices,
recorded and stopped like any run; `parallel` trials run at once when their devices are
free (a start refused for busy devices is tried again once one ends). A pruned trial is
stopped and saved through the orchestrator's normal stop, its run ends `stopped` and its
trial row `pruned`. On start the runner closes what a dead previous process left: rows
left `running`, and trials marked `interrupted` (never counted), so no trial is lost or
counted twice. The runner adds no process: it lives in the CLI (or server) that calls it.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from tunelab.config.run_config import RunConfig
from tunelab.orchestrator import NoActiveRun, RunActive
from tunelab.store import Store
from tunelab.store import sweeps as table
from tunelab.sweeps import study as studies
from tunelab.sweeps.spec import SweepSpec

# How long to wait before trying a start again while other trials hold the devices.
BUSY_RETRY_S = 1.0
EVENT_POLL_S = 0.5


class SweepRunner:
    """Runs one sweep to its budget with `orchestrator`; `say` reports each trial's news."""

    def __init__(self, store: Store, orchestrator: Any, spec: SweepSpec, say: Callable[[str], None] = lambda _line: None,
                 owned_by: str | None = None, prepare: Callable[[RunConfig], RunConfig] = lambda cfg: cfg):
        """`owned_by`: the API key that started the sweep, recorded as each trial run's owner.
        `prepare`: what a trial's config goes through before it starts (over HTTP: the caller's
        opt-ins, and its paths confined and resolved as a start's are)."""
        self.store, self.orchestrator, self.spec, self.say, self.owned_by = store, orchestrator, spec, say, owned_by
        self.prepare = prepare
        self.sweep = table.open_sweep(store, spec.name, spec.model_dump())
        self.study = studies.open_study(store, spec, self.sweep["id"])
        self._lock = threading.Lock()
        self._in_flight = 0
        self._stopping = threading.Event()
        self._live: set[int] = set()
        self._deadline = None if spec.max_hours is None else time.monotonic() + spec.max_hours * 3600

    @property
    def sweep_id(self) -> int:
        return self.sweep["id"]

    def recover(self) -> list[int]:
        """Close what a dead earlier process of this sweep left. A trial the study had
        already been told the end of keeps that end (the process died before recording it
        here); any other is `interrupted` here and FAIL in the study: neither counted nor lost."""
        told = studies.finished(self.study)
        left = set(table.interrupt_running(self.store, self.sweep_id))
        self._withdraw_queued(left)
        for number in left & set(told):
            state, value = told[number]
            table.end_trial(self.store, self.sweep_id, number, state, value)
        cut = sorted((left - set(told)) | set(studies.fail_running(self.study)))
        if cut:
            self.say(f"trial(s) {', '.join(map(str, cut))} were cut short by an earlier stop; not counted")
        return cut

    def _withdraw_queued(self, numbers: set[int]) -> None:
        """A cut trial's run still waiting in a server's queue would train for nothing: withdraw it."""
        for trial in table.list_trials(self.store, self.sweep_id):
            if trial["trial"] in numbers and trial["run_status"] == "queued":
                try:
                    self.orchestrator.stop_run(trial["run_id"], save=False)
                except Exception as exc:  # another server's queue, or it started meanwhile: closed as an orphan there
                    self.say(f"trial {trial['trial']}: its queued run {trial['run_id']} was left as it is ({exc})")

    def run(self) -> dict[str, Any]:
        """Run trials until the budget (`trials`, `max_hours`) is spent; returns the sweep row."""
        self.recover()
        workers = [threading.Thread(target=self._work, name=f"tunelab-sweep-{n}", daemon=True)
                   for n in range(self.spec.parallel)]
        for worker in workers:
            worker.start()
        for worker in workers:
            while worker.is_alive():
                worker.join(0.5)  # short joins: the main thread stays free for Ctrl-C
        return self.record_best()

    def stop(self) -> None:
        """Start no more trials and stop (save) the running ones; they count as interrupted."""
        self._stopping.set()
        for run_id in list(self._live):
            try:
                self.orchestrator.stop_run(run_id, save=True)
            except (NoActiveRun, RunActive):
                pass

    def _budget_left(self) -> bool:
        if self._stopping.is_set() or (self._deadline is not None and time.monotonic() > self._deadline):
            return False
        return table.counted_trials(self.store, self.sweep_id) + self._in_flight < self._trial_budget()

    def _trial_budget(self) -> int:
        if self.spec.sampler != "grid":
            return self.spec.trials
        size = 1
        for values in studies.grid(self.spec).values():
            size *= len(values)
        return min(self.spec.trials, size)  # a grid has no more points to try

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._budget_left():
                    return
                self._in_flight += 1
                trial = self.study.ask()
            try:
                self._trial(trial)
            finally:
                with self._lock:
                    self._in_flight -= 1

    def _trial(self, trial) -> None:
        params = studies.suggest(trial, self.spec)
        cfg = self.spec.trial_config(params, trial.number)
        inbox: "queue.Queue[dict]" = queue.Queue()
        unsubscribe = self.orchestrator.subscribe(inbox.put)  # before the start: no early eval is missed
        try:
            run_id = self._start(cfg, trial)
            if run_id is None:
                return
            table.add_trial(self.store, self.sweep_id, trial.number, run_id, params)
            self.say(f"trial {trial.number}: run {run_id} {_shown(params)}")
            pruned, value = self._follow(trial, run_id, inbox)
        finally:
            unsubscribe()
        self._finish(trial, run_id, pruned, value)

    def _start(self, cfg, trial) -> int | None:
        while True:
            try:
                return self.orchestrator.start(self.prepare(cfg), owned_by=self.owned_by)
            except RunActive:  # the devices are another trial's for now (or this process is ending)
                if getattr(self.orchestrator, "closed", False):
                    self._stopping.set()
                if self._stopping.is_set():  # not recorded here: neither counted nor lost
                    studies.tell(self.study, trial, state=studies.trial_states().FAIL)
                    return None
                time.sleep(BUSY_RETRY_S)
            except Exception as exc:  # refused by this machine (memory, a path, a file): a failed trial, counted
                studies.tell(self.study, trial, state=studies.trial_states().FAIL)
                table.add_trial(self.store, self.sweep_id, trial.number, None, studies.params_of(trial), state="failed")
                self.say(f"trial {trial.number}: refused: {exc}")
                return None

    def _follow(self, trial, run_id: int, inbox: "queue.Queue[dict]") -> tuple[bool, float | None]:
        """Feed the run's objective to the pruner until the run ends; (pruned?, last value)."""
        metric, pruned, value = self.spec.objective.metric, False, None
        self._live.add(run_id)
        try:
            while True:
                try:
                    event = inbox.get(timeout=EVENT_POLL_S)
                except queue.Empty:
                    if self._ended(run_id):
                        return pruned, value
                    continue
                if event.get("run_id") != run_id:
                    continue
                if event.get("type") == "progress":
                    reported = event.get(metric) if metric in event else (event.get("extra") or {}).get(metric)
                    if reported is not None:
                        value = float(reported)
                        trial.report(value, int(event.get("step") or 0))
                        if not pruned and not self._stopping.is_set() and trial.should_prune():
                            pruned = True
                            self.say(f"trial {trial.number}: pruned at step {event.get('step')} ({metric} {value:.4g})")
                            try:
                                self.orchestrator.stop_run(run_id, save=True)
                            except NoActiveRun:  # it ended on its own meanwhile
                                pass
                elif event.get("type") in ("complete", "error") and event.get("final"):
                    return pruned, value
        finally:
            self.orchestrator.wait_run(run_id, 60)
            self._live.discard(run_id)

    def _ended(self, run_id: int) -> bool:
        """The run is over and recorded (a queued run, on a server, has not begun yet)."""
        status = (self.store.get_run(run_id) or {}).get("status")
        return status not in ("queued", "running") and self.orchestrator.wait_run(run_id, 0)

    def _finish(self, trial, run_id: int, pruned: bool, value: float | None) -> None:
        states = studies.trial_states()
        status = (self.store.get_run(run_id) or {}).get("status")
        if pruned and status in ("stopped", "completed"):
            studies.tell(self.study, trial, state=states.PRUNED)
            table.end_trial(self.store, self.sweep_id, trial.number, "pruned", value)
        elif status == "completed" and value is not None:
            studies.tell(self.study, trial, value)
            table.end_trial(self.store, self.sweep_id, trial.number, "complete", value)
            self.say(f"trial {trial.number}: {self.spec.objective.metric} {value:.4g}")
        elif self._stopping.is_set() or getattr(self.orchestrator, "closed", False):
            # Stopped with the sweep, or ended by its process shutting down: cut short, not counted.
            studies.tell(self.study, trial, state=states.FAIL)
            table.end_trial(self.store, self.sweep_id, trial.number, "interrupted", value)
        else:
            studies.tell(self.study, trial, state=states.FAIL)
            table.end_trial(self.store, self.sweep_id, trial.number, "failed", value)
            why = "reported no " + self.spec.objective.metric if status == "completed" else f"run ended {status}"
            self.say(f"trial {trial.number}: failed ({why})")

    def record_best(self) -> dict[str, Any]:
        """Store which run was best (complete trials only) and return the sweep row."""
        done = [t for t in table.list_trials(self.store, self.sweep_id) if t["state"] == "complete" and t["value"] is not None]
        if done:
            pick = min if self.spec.objective.direction == "minimize" else max
            best = pick(done, key=lambda t: t["value"])
            table.set_best(self.store, self.sweep_id, best["run_id"], best["value"])
        self.sweep = table.get_sweep(self.store, self.sweep_id)
        return self.sweep


def _shown(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
