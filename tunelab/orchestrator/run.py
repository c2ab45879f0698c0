"""ActiveRun: the life of one run in the parent, from spawn to its single finalize.

Everything that belongs to one run lives here — its worker process and queues, progress
state, metric buffer, stop flags, watchdog and finalize-once guard — so a thread left
over from an older run (a pump, a watchdog) can only ever touch that older run. The
`Orchestrator` holds the pointer to the current run; this object is all that changes.

Subscribers never see the worker's own `complete`/`error`: they get exactly one
terminal event per run, after finalize, carrying the stored status (`final: True`).
"""

from __future__ import annotations

import logging
import threading
import time
from functools import cached_property
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Callable

from tunelab import events as ev
from tunelab import layout
from tunelab.config.run_config import RunConfig
from tunelab.orchestrator.metric_buffer import MetricBuffer
from tunelab.orchestrator.child import WorkerHandle, end_process, spawn_worker
from tunelab.orchestrator.cleanup import discard_cancelled_output, remove_dataset_caches, remove_rank_config
from tunelab.orchestrator.finalize import FinalizeOnce, RunFacts, decide_outcome, with_retries
from tunelab.orchestrator.ownership import RunClaim
from tunelab.orchestrator.progress_log import ProgressLog
from tunelab.orchestrator.prewarm import WarmWorkers
from tunelab.orchestrator.pump import start_pump
from tunelab.orchestrator.state import FINAL_PHASES, STAGE_TO_PHASE, ProgressState
from tunelab.orchestrator.watchdog import StopWatchdog, save_budget_s
from tunelab.orchestrator.plots import redact
from tunelab.store import Store

log = logging.getLogger("tunelab.orchestrator")

# The alternative hub download transport tried once after a stall.
STALL_RETRY_ENV = {"HF_HUB_DISABLE_XET": "1"}
STALLED_TWICE = "model download stalled twice; check the network"
# After the watchdog kills a worker, the pump gets this long to drain and finalize.
PUMP_TAKEOVER_S = 5.0
MALFORMED_LOG_FIRST = 10
TEXT_FIELDS = ("message", "status_message", "error", "stack")


class ActiveRun:
    def __init__(self, *, run_id: int, cfg: RunConfig, payload: dict[str, Any], env: dict[str, str],
                 target: str, mp_context: BaseContext, store: Store, output_dir: Path,
                 notify: Callable[[dict[str, Any]], None], warm: WarmWorkers | None = None,
                 claim: RunClaim | None = None, modality: str | None = None,
                 on_end: Callable[[int], None] | None = None):
        self.run_id = run_id
        self.cfg = cfg
        self.started_at = time.time()
        self._payload = {**payload, "run_id": run_id}  # the worker names its run (export_after's manifest)
        self._env = env
        self._target = target
        self._mp = mp_context
        self._store = store
        self._notify = notify
        self._warm = warm
        self._claim = claim  # owner and device locks, held until the run is finalized
        self.devices = list(claim.devices) if claim is not None else []
        self._on_end = on_end  # told once the run is finalized and its devices are free
        self._secrets = cfg.secret_values()
        self.lock = threading.RLock()
        self.state = ProgressState()
        self.state.phase = "loading_model"
        self.state.message = "starting the worker"
        self.state.output_dir = str(output_dir)
        self.state.modality = modality  # a resumed run's is its parent's from the start
        self.worker: WorkerHandle | None = None
        self.last_event: dict[str, Any] | None = None
        self.cancel_requested = False
        self.save_requested = False
        self.failure: str | None = None
        self.stalls = 0
        self.model_loaded = False
        self.progress_events: list[dict[str, Any]] = []
        self.final_loss: float | None = None
        self.buffer = MetricBuffer()
        self.progress_log = ProgressLog(run_id)
        self.watchdog = StopWatchdog(run_id, self.force_end)
        self.finalizer = FinalizeOnce()
        self._pump: threading.Thread | None = None

    # --- process and pump -------------------------------------------------------------
    @property
    def finalized(self) -> bool:
        return self.finalizer.done.is_set()

    def spawn(self, extra_env: dict[str, str] | None = None) -> None:
        env = {**self._env, **(extra_env or {})}
        # A retry with extra environment (the stall path) must set it before any import: cold.
        warm = self._warm.take(self._target, self._payload, env) if self._warm is not None and not extra_env else None
        self.worker = warm or spawn_worker(self._mp, self._target, self._payload, env, name=f"tunelab-worker-{self.run_id}")
        log.info("run %s: worker pid %s %s", self.run_id, self.worker.process.pid, "took the job (prewarmed)" if warm else "started")

    def worker_alive(self) -> bool:
        return self.worker is not None and self.worker.alive()

    def start_pump(self) -> None:
        self._pump = start_pump(self)

    def pump_thread(self) -> threading.Thread | None:
        return self._pump

    def ensure_pump(self) -> None:
        """Restart the pump if it died while the run is unfinished (SPEC: a poll revives it)."""
        with self.lock:
            if self._pump is None or self._pump.is_alive() or self.finalized:
                return
            log.error("run %s: the event pump thread died; restarting it", self.run_id)
            self.start_pump()

    # --- events -----------------------------------------------------------------------
    def count_malformed(self, reason: str) -> None:
        with self.lock:
            self.state.malformed_events += 1
            count = self.state.malformed_events
        if count <= MALFORMED_LOG_FIRST or count % 100 == 0:
            # The reason quotes what the event carried, which may be a secret.
            log.warning("run %s: skipped malformed event #%d: %s", self.run_id, count,
                        redact(reason, self._secrets)[:300])

    def apply(self, raw: Any) -> None:
        try:
            event = ev.parse(raw)
        except ev.MalformedEvent as exc:
            self.count_malformed(str(exc))
            return
        for key in TEXT_FIELDS:  # free text from libraries can echo a token; paths are left as they are
            if isinstance(event.get(key), str):
                event[key] = redact(event[key], self._secrets)
        with self.lock:
            if self.finalized:
                return
            forward = self._apply_locked(event)
        if forward:
            self._notify({**event, "run_id": self.run_id})

    def _apply_locked(self, event: dict[str, Any]) -> bool:
        """Update state for one event; True when subscribers should see it."""
        kind = event["type"]
        state = self.state
        if kind == ev.PROGRESS:
            self._apply_progress(event)
        elif kind == ev.STATUS:
            state.message = event["message"]
            phase = STAGE_TO_PHASE.get(event.get("stage"))
            if phase and state.phase not in FINAL_PHASES:
                state.phase = phase
        elif kind == ev.MODEL_LOAD_STARTED:
            state.phase, state.message = "loading_model", "loading the model"
        elif kind == ev.MODEL_LOAD_COMPLETED:
            self.model_loaded = True
            state.message = "model loaded"
        elif kind == ev.STALL:
            state.message = event["message"]
            if state.phase == "loading_model" and not self.model_loaded:
                self._on_model_download_stall()
        elif kind == ev.MODALITY:
            if event["modality"] != state.modality:
                state.modality = event["modality"]
                self._store_quietly("record the modality", self._store.set_modality, self.run_id, state.modality)
        elif kind == ev.EVAL_CONFIGURED:
            state.message = "evaluation configured"
        elif kind == ev.OUTPUT_DIR:
            if event.get("output_dir"):
                state.output_dir = event["output_dir"]
                self._store_quietly("record the output folder", self._store.set_output_dir, self.run_id, state.output_dir)
        elif kind in (ev.COMPLETE, ev.ERROR):
            self.last_event = event
            if kind == ev.COMPLETE:
                state.message = event.get("status_message") or "finishing"
                if event.get("output_dir"):
                    state.output_dir = event["output_dir"]
            else:
                state.error = event["error"]
            state.phase = "finalizing"
            self.watchdog.after_last_event()
            return False  # subscribers get the stored outcome after finalize instead
        return True

    def _apply_progress(self, event: dict[str, Any]) -> None:
        known_total = self.state.numbers["total_steps"]
        row = self.state.apply_progress(event)
        self.progress_events.append({**event, "run_id": self.run_id})
        if self.buffer.add(row):
            self.buffer.flush_in_background(self._store, self.run_id)
        total = event.get("total_steps")
        if total is not None and total != known_total:
            self._store_quietly("record total steps", self._store.set_total_steps, self.run_id, total)
        self.progress_log.step(event)

    def flush_if_due(self) -> None:
        """Store waiting metric rows once the oldest has waited long enough (the pump calls
        this between events, so slow steps reach the database too)."""
        if self.buffer.due():
            self.buffer.flush_in_background(self._store, self.run_id)

    def _store_quietly(self, what: str, action: Callable[..., Any], *args: Any) -> None:
        """A write the run can live without for now (metrics stay buffered until finalize)."""
        try:
            action(*args)
        except Exception as exc:
            log.warning("run %s: could not %s: %s", self.run_id, what, exc)

    def _on_model_download_stall(self) -> None:
        self.stalls += 1
        if self.cancel_requested or self.save_requested:
            return  # the stop cap ends it; a respawned worker would not know about the stop
        end_process(self.worker.process)
        if self.stalls >= 2:
            self.failure = STALLED_TWICE
            return  # the pump sees the exit, drains and finalizes with this failure
        log.warning("run %s: the model download stalled; retrying once with HF_HUB_DISABLE_XET=1", self.run_id)
        try:
            self.spawn(STALL_RETRY_ENV)
        except Exception as exc:
            self.failure = f"could not restart the worker after a download stall: {exc}"
            return
        self.state.message = "the model download stalled; retrying with HF_HUB_DISABLE_XET=1"

    # --- stop, watchdog -----------------------------------------------------------------
    def request_stop(self, save: bool) -> None:
        """Signal the worker (a cancel must already be persisted by the caller)."""
        with self.lock:
            if self.finalized or self.last_event is not None:
                return  # it is finishing on its own; a stop would only muddle the outcome
            if save and self.cancel_requested:
                return  # a cancel is never undone by a later save
            if save:
                self.save_requested = True
                self.state.message = "stopping: saving a checkpoint"
            else:
                self.cancel_requested = True
                self.state.message = "cancelling"
            try:
                self.worker.stops.put(ev.stop_message(save))
            except (ValueError, OSError) as exc:
                log.warning("run %s: could not send the stop message (%s); the watchdog will end the worker", self.run_id, exc)
            self.watchdog.after_stop_request(save)

    def stop_for_shutdown(self, grace_s: float) -> None:
        """Stop and save because the process must end within `grace_s`: the save gets most
        of it; a run not finalized by then is ended and recorded `error`, resumable from
        its last valid checkpoint, with the rest of the grace left to record that."""
        self.request_stop(save=True)
        self.watchdog.shutdown_deadline(save_budget_s(grace_s))

    def force_end(self, reason: str, failure: str | None = None) -> None:
        """End the worker from outside (watchdog, shutdown) and make sure the run finalizes."""
        if self.finalized:
            return
        with self.lock:
            if failure and not self.failure:
                self.failure = failure
            worker = self.worker
        if worker is not None:
            end_process(worker.process)
        # The pump normally notices the exit, drains what the worker sent and finalizes.
        pump = self._pump
        if pump is not None and pump.is_alive() and pump is not threading.current_thread():
            if self.finalizer.done.wait(PUMP_TAKEOVER_S):
                return
        log.warning("run %s: finalizing from the parent's state (%s)", self.run_id, reason)
        self.finish()

    # --- finalize -----------------------------------------------------------------------
    def finish(self, failure: str | None = None) -> bool:
        """Finalize the run unless someone already did; True when this call did it."""
        final_event: dict[str, Any] = {}

        def write() -> None:
            with self.lock:
                if failure and not self.failure:
                    self.failure = failure
                self.watchdog.disarm()
                final_event.update(self._write_outcome())

        did_it = self.finalizer.run(write)
        if did_it and self._claim is not None:
            self._claim.release()  # recorded: another process may now close or reuse what it held
        if did_it and self.worker is not None:
            self.worker.release()
        if did_it and self._warm is not None:
            self._warm.refill()  # now that this run no longer needs the cores
        if did_it and final_event:
            self._notify(final_event)
        if did_it and self._on_end is not None:
            self._on_end(self.run_id)
        return did_it

    def _write_outcome(self) -> dict[str, Any]:
        state = self.state
        outcome = decide_outcome(RunFacts(
            last_event=self.last_event, cancel_requested=self.cancel_requested, save_requested=self.save_requested,
            step=state.step, total_steps=state.numbers["total_steps"], output_dir=state.output_dir,
            exitcode=self.worker.exitcode if self.worker else None, failure=self.failure,
        ))
        message, error = outcome.message, outcome.error
        if not outcome.keep_output_dir:
            # A cancel keeps nothing; the history says what became of the folder.
            message = error = discard_cancelled_output(state.output_dir, self._runs_sharing(state.output_dir))
            log.info("run %s: %s", self.run_id, message)
        output_dir = state.output_dir if outcome.keep_output_dir else None
        remove_rank_config(output_dir)  # secrets; the launcher removes it too, unless it was killed
        if outcome.status == "completed":
            remove_dataset_caches(output_dir)
        if outcome.step is not None:
            state.step = outcome.step  # the step the worker saved, which the last report may lag
        ended_at = time.time()
        self.final_loss = state.numbers["loss"]
        try:
            with_retries(lambda: self.buffer.flush(self._store, self.run_id), "storing the last metrics")
        except Exception as exc:
            log.error("run %s: %d metric rows could not be stored: %s", self.run_id, self.buffer.pending(), exc)
        try:
            with_retries(lambda: self._store.finalize_run(
                self.run_id, status=outcome.status, ended_at=ended_at, total_steps=state.numbers["total_steps"],
                final_step=state.step, final_loss=self.final_loss, duration_seconds=ended_at - self.started_at,
                output_dir=output_dir, error_message=error, loss_sparkline=state.finite_losses(),
                resume_blocked=outcome.resume_blocked,
            ), "recording the run's end")
        except Exception as exc:
            log.error("run %s: the run's end could not be recorded (%s); it is closed at the next start-up", self.run_id, exc)
        state.phase = state.status = outcome.status
        state.message = message
        state.error = outcome.error
        state.resume_blocked = outcome.resume_blocked
        state.output_dir = output_dir
        log.info("run %s: %s at step %s (%s)", self.run_id, outcome.status, state.step, outcome.message)
        return {
            **ev.make(ev.ERROR if outcome.status == "error" else ev.COMPLETE), "run_id": self.run_id, "final": True,
            "status": outcome.status, "status_message": message, "error": outcome.error,
            "resume_blocked": outcome.resume_blocked, "output_dir": output_dir, "final_step": state.step,
            "final_loss": self.final_loss, "total_steps": state.numbers["total_steps"],
        }

    def _runs_sharing(self, folder: str | None) -> list[int] | None:
        """Other runs using `folder`; None when the store cannot say (the folder is then kept)."""
        if not folder:
            return []
        try:
            return self._store.runs_sharing_output_dir(folder, except_run_id=self.run_id)
        except Exception as exc:
            log.warning("run %s: could not check who else uses %s: %s", self.run_id, folder, exc)
            return None

    # --- reading ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            data = self.state.as_dict()
        worker = self.worker
        data.update(run_id=self.run_id, started_at=self.started_at, model_name=self.cfg.model_name,
                    dataset_name=self.cfg.dataset_label, display_name=self.cfg.display_name,
                    final_loss=self.final_loss, worker_pid=worker.process.pid if worker else None,
                    world_size=self.world_size)
        return data

    @cached_property
    def world_size(self) -> int:
        """How many training processes the run spans (all nodes together): planned once,
        its payload and devices are fixed."""
        return layout.plan(self._payload, layout.visible_gpu_count(self._env)).world_size

    def progress_after(self, step: int) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self.progress_events if e["step"] > step]
