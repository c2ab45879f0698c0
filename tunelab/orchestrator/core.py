"""The Orchestrator: the one object that starts runs and answers for them.

It validates a start completely before anything happens; then, when the devices the
run needs are free, runs the optional `before_spawn` hook, chooses GPUs, claims the
run's devices and owner lock (see ownership.py), creates the history row and spawns the
worker; from then on the run's own `ActiveRun` (pump, watchdog, finalize) carries it to
its end. Several runs train at once on disjoint devices. A start whose devices are busy
is queued (a `queued` row; `queue: false` in its config, or an orchestrator made with
`queueing=False` like the CLI's, refuses instead), and the scheduler thread starts queued
runs in order as devices free up (queueing.py; placement in scheduler.py), also those a
previous server life left queued. Secrets are never stored: a queued run keeps them in this process's
memory; one picked up after a restart takes them from the environment, or fails
saying which secret to give again.
The methods without a run id (snapshot, stop, metrics, ...) are about the most recent
run (the newest started or queued here); the `run_*` methods take a run id.
`stop_for_shutdown` is what SIGTERM and SIGHUP mean to the server and the CLI.
Surfaces (HTTP server, CLI) use only the methods below; see docs/ARCHITECTURE.md.
The parent never imports torch & co: the worker is named by a dotted path and only
the child imports it.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import secrets
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

from tunelab import events as ev
from tunelab import hardware, layout, paths
from tunelab.config import SECRETS_USED_KEY, ConfigError, RunConfig, check_machine, parse_config, resume_config
from tunelab.orchestrator import ownership
from tunelab.orchestrator.child import DEFAULT_WORKER, target_name
from tunelab.orchestrator.errors import NoActiveRun, NotResumable, PersistError, RunActive, RunMismatch
from tunelab.orchestrator.finalize import with_retries
from tunelab.orchestrator.gpus import auto_gpu_env, gpu_env
from tunelab.orchestrator.memory_check import fit_memory
from tunelab.orchestrator.prechecks import check_before_start
from tunelab.orchestrator.prewarm import WarmWorkers, prewarm_wanted
from tunelab.orchestrator.resume import check_resumable, check_world_size, resolve_resume_from
from tunelab.orchestrator.run import ActiveRun
from tunelab.orchestrator.queueing import QueueRunner
from tunelab.orchestrator.scheduler import PlannedStart, device_request, devices_for, place, queued_snapshot
from tunelab.orchestrator.state import ProgressState
from tunelab.plots import loss_plot_png, plot_title
from tunelab.store import AlreadyResumed, DuplicateStartRequest, InvalidValue, RunNotFound, Store

log = logging.getLogger("tunelab.orchestrator")

CANCEL_PERSIST_ATTEMPTS = 3


class Orchestrator(QueueRunner):
    def __init__(self, store: Store, *, worker_target: str | Callable[..., Any] = DEFAULT_WORKER,
                 before_spawn: Callable[[], Any] | None = None, mp_context: str = "spawn",
                 prewarm: bool | Sequence[str] | None = None, queueing: bool = True):
        """`prewarm`: keep one worker with its heavy imports done, waiting for the next run
        (see prewarm.py). True preloads the default backend's libraries, a list of module
        names preloads those, None follows TUNELAB_PREWARM (off when unset).
        `queueing`: queue starts whose devices are busy and run the history's queue (a
        server); False refuses them instead and leaves the queue alone (the CLI's own run)."""
        if mp_context == "fork":
            raise ValueError("mp_context='fork' is not allowed: each run needs fresh CUDA state and fresh imports; use 'spawn'")
        self.store = store
        self.instance_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._target = target_name(worker_target)
        self._before_spawn = before_spawn
        self._mp = multiprocessing.get_context(mp_context)
        self._queueing = queueing
        # Serialises starts, queue passes and stops against a start in progress: a second
        # start with the same request id waits, then finds the run the first one created.
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()  # guards the fields below
        self._runs: dict[int, ActiveRun] = {}  # live runs, and the last few finished ones
        self._latest: int | None = None  # the most recent run: what the run-less methods are about
        self._waiting: dict[int, PlannedStart] = {}  # runs queued here, with their secrets (never stored)
        self._spawning = False
        self._closed = False
        self._subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._atexit = _shutdown_at_exit(weakref.ref(self))
        atexit.register(self._atexit)
        self._warm: WarmWorkers | None = None
        if prewarm_wanted(False) if prewarm is None else prewarm:
            modules = None if prewarm is None or prewarm is True else list(prewarm)
            self._warm = WarmWorkers(self._mp, auto_gpu_env, modules)
            self._warm.refill()
        self._wake = threading.Event()
        self._scheduler: threading.Thread | None = None
        if queueing:  # its first pass picks up what a previous server life left queued
            self._scheduler = threading.Thread(target=self._schedule_loop, name="tunelab-scheduler", daemon=True)
            self._scheduler.start()

    # --- starting -----------------------------------------------------------------------
    def start(self, config: RunConfig | dict[str, Any], *, resume_run_id: int | None = None,
              start_request_id: str | None = None, owned_by: str | None = None) -> int:
        """Start a run, or queue it while its devices are busy, and return its id; raises
        before anything happens if it cannot run. `owned_by`: the API key that asked
        (recorded as the run's owner; never in its config). `queue_position(id)` says
        whether it waits."""
        cfg = config if isinstance(config, RunConfig) else parse_config(config)
        with self._start_lock:
            if self._closed:
                raise RunActive("tunelab is shutting down; no new runs can start")
            if start_request_id is not None:
                known = self._run_for_request(start_request_id)
                if known is not None:
                    return known
            may_queue = self._queueing and cfg.queue
            if not may_queue:
                self._refuse_if_busy(cfg)
            check_machine(cfg, hardware.cuda_device_count())
            if self._target == DEFAULT_WORKER:  # a substituted worker (tests' fakes) reads no files
                check_before_start(cfg)
            label = cfg.display_name or Path(cfg.model_name).name or cfg.model_name
            output_dir = paths.resolve_output_dir(cfg.output_dir, label, cfg.allow_output_outside_root,
                                                  taken=lambda folder: bool(self.store.runs_sharing_output_dir(folder)))
            resume_from, resumed_from = resolve_resume_from(self.store, cfg.resume_from, resume_run_id)
            if cfg.output_dir:
                self._refuse_foreign_folder(output_dir, resumed_from)
            plan = PlannedStart(cfg, output_dir, resume_from, resumed_from, resume_run_id, start_request_id, owned_by)
            if may_queue:
                gpus = hardware.list_gpus()
                self._check_for_later(plan, gpus)
                # Runs already waiting go first; so does everything when the devices are busy.
                if self._queue_has_runs() or place(cfg, gpus, self._busy()) is None:
                    return self._enqueue(plan)
            with self._lock:
                self._spawning = True
            try:
                run_id = self._launch(plan, may_wait=may_queue)
                return run_id if run_id is not None else self._enqueue(plan)
            finally:
                with self._lock:
                    self._spawning = False

    def _refuse_foreign_folder(self, output_dir: Path, resumed_from: int | None) -> None:
        """An output_dir that is, holds or lies inside another run's folder would overwrite
        (or, on cancel or delete, remove) that run's files. The one exception: a run
        continuing the run it resumes, in that run's own folder."""
        owners = self.store.runs_sharing_output_dir(output_dir)
        if resumed_from is not None:
            parent = self.store.get_run(resumed_from) or {}
            if parent.get("output_dir") and Path(os.path.realpath(parent["output_dir"])) == output_dir:
                return
        if owners:
            whose = ", ".join(f"run {n}" for n in owners)
            raise ConfigError.single("output_dir", f"{output_dir} is, holds or lies inside the folder of {whose}; a new run "
                                                   "there would overwrite its files. Choose a new folder, or leave output_dir "
                                                   "out for a fresh one")

    def _run_for_request(self, start_request_id: str) -> int | None:
        try:
            known = self.store.find_by_start_request_id(start_request_id)
        except Exception as exc:
            raise PersistError(f"the run database cannot be read ({exc}); nothing was started") from exc
        return known["id"] if known is not None else None

    def _live_runs(self) -> list[ActiveRun]:
        with self._lock:
            return [r for r in self._runs.values() if not r.finalized or r.worker_alive()]

    def _own_devices(self) -> set[Any]:
        return {d for run in self._live_runs() for d in run.devices}

    def _busy(self) -> set[Any]:
        """Devices held by this server's live runs and by every running run on this machine in the database."""
        return self._own_devices() | self.store.devices_in_use(host=socket.gethostname())

    def _refuse_if_busy(self, cfg: RunConfig) -> None:
        """A start that may not wait: refused while its devices are busy here."""
        if place(cfg, hardware.list_gpus(), self._own_devices()) is None:
            ids = ", ".join(str(r.run_id) for r in self._live_runs())
            raise RunActive(f"run {ids} is active on the devices this run needs; stop it or wait for it to finish "
                            "(or set queue: true to wait in the queue)")

    def _public(self, plan: PlannedStart, cfg: RunConfig) -> dict[str, Any]:
        return {**cfg.public(), SECRETS_USED_KEY: cfg.secret_names(), "output_dir": str(plan.output_dir),
                "resume_from": str(plan.resume_from) if plan.resume_from else None}

    def _launch(self, plan: PlannedStart, *, may_wait: bool, queued_id: int | None = None) -> int | None:
        """Start `plan` on free devices now: a new row, or the queued row `queued_id`
        claimed atomically. None when its devices are busy after all and it `may_wait`
        (or another server claimed the queued row first)."""
        self._call_before_spawn()
        gpus = hardware.list_gpus()  # after the hook: it may just have freed GPU memory
        # A start that may not wait meets other processes' runs at their device locks, whose
        # refusal names the run and its process.
        chosen = place(plan.cfg, gpus, self._busy() if may_wait else self._own_devices())
        if chosen is None:
            if may_wait:
                return None
            raise RunActive("the devices this run needs are busy; wait for the runs on them to finish")
        env = gpu_env(plan.cfg, chosen)
        planned = layout.plan(plan.cfg.model_dump(), layout.visible_gpu_count(env))
        cfg, memory_notes = fit_memory(plan.cfg, chosen, planned.world_size, planned.processes_per_node)
        public = self._public(plan, cfg)
        payload = {**cfg.worker_payload(), "output_dir": str(plan.output_dir),
                   "resume_from": str(plan.resume_from) if plan.resume_from else None}
        if plan.resume_from is not None:  # the world size is known only now, from the GPUs just chosen
            check_world_size(plan.resume_from, layout.plan(payload, layout.visible_gpu_count(env)).world_size)
        devices = devices_for(chosen)
        # Before the row is running: a refused start leaves nothing behind, and a row is
        # never `running` without its owner holding the lock that says so.
        try:
            claim = ownership.RunClaim(paths.locks_dir(self.store.path), devices)
        except ownership.DeviceBusy:
            if may_wait:  # another process on this home trains there; wait in the queue
                return None
            raise
        try:
            if queued_id is None:
                run_id, modality = self._create_row(cfg, public, plan.resumed_from, plan.start_request_id, claim,
                                                    plan.owned_by, devices)
            else:
                run_id, modality = queued_id, (self.store.get_run(queued_id) or {}).get("modality")
                owner = {"lock": claim.owner_lock, "pid": claim.pid, "started_at": claim.started_at}
                if not self.store.claim_queued(queued_id, self.instance_id, devices, owner=owner):
                    claim.release()  # cancelled meanwhile, or another server took it
                    with self._lock:
                        self._waiting.pop(queued_id, None)
                    return None
        except DuplicateStartRequest as exc:  # another process took this request id first
            claim.release()
            return exc.run_id
        except BaseException:
            claim.release()
            raise
        claim.record_run(run_id)
        run = ActiveRun(run_id=run_id, cfg=cfg, payload=payload, env=env, target=self._target, mp_context=self._mp,
                        store=self.store, output_dir=plan.output_dir, notify=self._notify, warm=self._warm, claim=claim,
                        modality=modality, on_end=self._run_ended)
        with self._lock:
            self._runs[run_id] = run
            self._waiting.pop(run_id, None)
            if queued_id is None or self._latest is None:
                self._latest = run_id
        if queued_id is not None:
            run.apply(ev.status(f"started from the queue on {', '.join(devices)}"))
        for note in memory_notes:  # what the memory check changed or warns of, in the run's own events
            run.apply(ev.status(note))
        if queued_id is None and plan.resume_run_id is not None:
            self._record_resume(plan.resume_run_id, run_id, on_failure=lambda why: run.finish(failure=why))
        try:
            run.spawn()
        except Exception as exc:
            log.exception("run %s: the worker could not be started", run_id)
            run.finish(failure=f"could not start the worker process: {exc}")
            return run_id
        run.start_pump()
        return run_id

    def _record_resume(self, resume_run_id: int, run_id: int, on_failure: Callable[[str], Any]) -> None:
        try:
            # check_resumable (just now, under the start lock) found any earlier continuation void.
            void = (self.store.get_run(resume_run_id) or {}).get("resumed_by_run_id")
            self.store.mark_resumed(resume_run_id, run_id, replacing=void)
        except AlreadyResumed as exc:
            on_failure(str(exc))
            raise NotResumable(resume_run_id, f"it was already resumed as run {exc.by_run_id}") from None
        except Exception as exc:
            on_failure(f"could not record that it resumes run {resume_run_id}: {exc}")
            raise PersistError(f"the resume could not be recorded ({exc}); nothing was started") from exc

    def _call_before_spawn(self) -> None:
        if self._before_spawn is None:
            return
        try:
            self._before_spawn()
        except Exception:
            # SPEC: the hook (e.g. freeing GPU memory) is best effort and never blocks a start.
            log.exception("the before_spawn hook failed; starting the run anyway")

    def _create_row(self, cfg: RunConfig, public: dict[str, Any], resumed_from: int | None,
                    start_request_id: str | None, claim: ownership.RunClaim,
                    owned_by: str | None, devices: list[str]) -> tuple[int, str | None]:
        """The run's row, and its modality when already known: a resumed run trains on what
        its parent trained on, and says so before its worker does."""
        owner = {"lock": claim.owner_lock, "pid": claim.pid, "started_at": claim.started_at}
        try:
            modality = (self.store.get_run(resumed_from) or {}).get("modality") if resumed_from is not None else None
            run_id = self.store.create_run(public, cfg.model_name, cfg.dataset_label, cfg.display_name, resumed_from,
                                           start_request_id=start_request_id, owner=owner, modality=modality,
                                           owned_by=owned_by, device_request=device_request(cfg), devices=devices,
                                           claimed_by=self.instance_id)
        except DuplicateStartRequest:
            raise
        except InvalidValue as exc:
            raise ConfigError.single(exc.field, str(exc).split(": ", 1)[-1]) from None
        except Exception as exc:
            raise PersistError(f"the run could not be recorded in the database ({exc}); nothing was started") from exc
        try:
            self.store.set_output_dir(run_id, public["output_dir"])
        except Exception as exc:
            log.warning("run %s: could not record its output folder yet: %s", run_id, exc)
        return run_id, modality

    def resume(self, run_id: int, secrets: dict[str, Any] | None = None, *, owned_by: str | None = None) -> int:
        """Start a new run that continues `run_id` from its latest valid checkpoint.
        `secrets` (hf_token, wandb_token, s3 keys) are given again: the database never
        held them; a secret the run used and that is neither here nor in the environment
        is a ConfigError before anything starts."""
        row, _ = check_resumable(self.store, run_id)
        # resume_from stays empty: start() takes the run's checkpoint through resume_run_id,
        # which also covers an output folder outside the outputs root that was allowed.
        stored = {**row["config"], "resume_from": None, "output_dir": row["output_dir"]}
        return self.start(resume_config(stored, secrets, os.environ), resume_run_id=run_id, owned_by=owned_by)

    # --- stopping -----------------------------------------------------------------------
    def stop(self, save: bool, expected_run_id: int | None = None) -> None:
        """Stop and save (`save=True`) or cancel the most recent run (a queued one is cancelled)."""
        with self._start_lock:  # a start in progress finishes spawning first
            latest = self._latest
        run = self._runs.get(latest) if latest is not None else None
        queued = latest is not None and run is None and self.queue_position(latest) is not None
        if latest is None or (run is None and not queued) or (run is not None and run.finalized):
            raise NoActiveRun("no run is active")
        if expected_run_id is not None and expected_run_id != latest:
            raise RunMismatch(expected_run_id, latest)
        self.stop_run(latest, save)

    def stop_run(self, run_id: int, save: bool) -> str:
        """Stop and save, or cancel, run `run_id`; a queued run is cancelled either way.
        Returns what happened: "stopping" or "cancelled"."""
        with self._start_lock:  # a start in progress finishes spawning first
            run = self._runs.get(run_id)
        if run is None:
            if self.cancel_queued(run_id):
                return "cancelled"
            row = self.store.get_run(run_id)
            if row is None:
                raise RunNotFound(run_id)
            where = " by another server" if row["status"] == "running" else ""
            raise NoActiveRun(f"run {run_id} is {row['status']}{where}; only an active or queued run here can be stopped")
        if run.finalized:
            raise NoActiveRun(f"run {run_id} has already ended")
        if not save:
            try:
                with_retries(lambda: self.store.mark_cancel_requested(run.run_id), "recording the cancel",
                             attempts=CANCEL_PERSIST_ATTEMPTS)
            except Exception as exc:
                raise PersistError(f"the cancel could not be recorded ({exc}); the run was not signalled, try again") from exc
        run.request_stop(save)
        return "stopping"

    def reset(self) -> None:
        """Forget a finished run so the state reads idle again."""
        with self._start_lock:
            latest = self._latest
            run = self._runs.get(latest) if latest is not None else None
            if run is not None:
                if not run.finalized or run.worker_alive():
                    raise RunActive(f"run {run.run_id} is active; stop it or wait for it to finish")
                pump = run.pump_thread()
                if pump is not None and pump.is_alive():
                    raise RunActive(f"run {run.run_id} is still finishing; try again in a moment")
            elif latest is not None and self.queue_position(latest) is not None:
                raise RunActive(f"run {latest} is queued; cancel it or wait for it to run")
            with self._lock:
                self._latest = None

    def stop_for_shutdown(self, grace_s: float) -> int | None:
        """What SIGTERM means: start no new run, and have every active run stop at its next
        step boundary and save, finalized within `grace_s` (else it is ended and recorded
        `error`, resumable from its last valid checkpoint). Queued runs stay queued for the
        next server life. Returns at once, with the id of the most recent run that is
        stopping (None when none was active); `wait_idle` waits for all of them."""
        with self._start_lock:  # a start in progress finishes spawning first
            with self._lock:
                self._closed = True
                runs = [r for r in self._runs.values() if not r.finalized]
        self._wake.set()
        if self._warm is not None:
            self._warm.close()  # no next run to warm up for; its memory is better spent on the save
        for run in runs:
            run.stop_for_shutdown(grace_s)
        return max((r.run_id for r in runs), default=None)

    @property
    def closed(self) -> bool:
        """True once the orchestrator is shutting down: it starts no new runs."""
        return self._closed

    def shutdown(self) -> None:
        """End every active worker (recorded as an error, resumable from its checkpoint)."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
        self._wake.set()
        atexit.unregister(self._atexit)
        if self._warm is not None:
            self._warm.close()
        for run in runs:
            if not run.finalized:
                run.force_end("shutdown", failure="tunelab shut down during training")
        self.wait_idle(10)

    # --- reading ------------------------------------------------------------------------
    def is_training_active(self) -> bool:
        with self._lock:
            spawning = self._spawning
        return spawning or bool(self._live_runs())

    def prewarm_status(self) -> dict[str, Any]:
        """{"enabled", "pid", "ready"}: the worker waiting for the next run, if any."""
        if self._warm is None:
            return {"enabled": False, "pid": None, "ready": False}
        return {"enabled": True, **self._warm.status()}

    def active_run_ids(self) -> list[int]:
        """The runs this server trains now, oldest first."""
        return sorted(r.run_id for r in self._live_runs())

    def snapshot(self) -> dict[str, Any]:
        """The most recent run's state (idle when there is none)."""
        latest = self._latest
        if latest is None:
            data = {**ProgressState().as_dict(), "run_id": None, "started_at": None, "model_name": None,
                    "dataset_name": None, "display_name": None, "final_loss": None, "worker_pid": None,
                    "world_size": None}
        else:
            data = self.run_snapshot(latest, deleted_too=True)
        data["is_training_running"] = self.is_training_active()
        return data

    def run_snapshot(self, run_id: int, *, deleted_too: bool = False) -> dict[str, Any]:
        """One run's state: live when it trains (or trained) here, else from its row;
        RunNotFound when there is no such run — also for a finished run held here whose row
        was deleted since, unless `deleted_too` (/api/train/status keeps showing the last run)."""
        run = self._runs.get(run_id)
        if (run is not None and not deleted_too and run.finalized and not run.worker_alive()
                and self.store.get_run(run_id) is None):
            raise RunNotFound(run_id)
        if run is None:
            row = self.store.get_run(run_id)
            if row is None:
                raise RunNotFound(run_id)
            data = queued_snapshot(row, self.queue_position(run_id) if row["status"] == "queued" else None)
            data["histories"] = ProgressState().histories()
        else:
            run.ensure_pump()
            data = {**run.snapshot(), "devices": list(run.devices), "queue_position": None}
        data["is_training_running"] = run is not None and (not run.finalized or run.worker_alive())
        return data

    def metrics(self) -> dict[str, Any]:
        return self.run_metrics(self._latest) if self._latest is not None else ProgressState().histories()

    def run_metrics(self, run_id: int) -> dict[str, Any]:
        run = self._runs.get(run_id)
        if run is None:
            return ProgressState().histories()
        with run.lock:
            return run.state.histories()

    def progress_since(self, step: int) -> list[dict[str, Any]]:
        return self.run_progress_since(self._latest, step) if self._latest is not None else []

    def run_progress_since(self, run_id: int, step: int) -> list[dict[str, Any]]:
        run = self._runs.get(run_id)
        return run.progress_after(step) if run is not None else []

    def view(self, run_id: int) -> "RunView":
        """The reading methods of one run, shaped like the orchestrator's own (for a
        progress stream that follows that run)."""
        self.run_snapshot(run_id)  # RunNotFound now rather than inside a stream
        return RunView(self, run_id)

    def plot_png(self, theme: str = "light") -> bytes:
        run = self._runs.get(self._latest) if self._latest is not None else None
        snap = self.snapshot()
        secrets = run.cfg.secret_values() if run is not None else []
        history = snap["histories"]
        return loss_plot_png(history["steps"], history["loss"], title=plot_title(snap, secrets), theme=theme,
                             eval_steps=history["eval_steps"], eval_losses=history["eval_loss"])

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every run here is finalized and its pump has finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            runs = list(self._runs.values())
        return all([self._wait_run(run, deadline) for run in runs])

    def wait_run(self, run_id: int, timeout: float | None = None) -> bool:
        run = self._runs.get(run_id)
        return run is None or self._wait_run(run, None if timeout is None else time.monotonic() + timeout)

    @staticmethod
    def _wait_run(run: ActiveRun, deadline: float | None) -> bool:
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        if not run.finalizer.done.wait(left()):
            return False
        pump = run.pump_thread()
        if pump is not None and pump is not threading.current_thread():
            pump.join(left())
            return not pump.is_alive()
        return True

    # --- subscribers --------------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call `callback(event)` for each event of every run (each carries its `run_id`;
        from the pump thread; it must not block)."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def _notify(self, event: dict[str, Any]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(dict(event))
            except Exception:
                log.exception("an event subscriber failed; it stays subscribed")


class RunView:
    """One run seen through the orchestrator's reading interface (snapshot, progress_since,
    subscribe), so a progress stream can follow a run that is not the most recent."""

    def __init__(self, orchestrator: Orchestrator, run_id: int):
        self._orchestrator = orchestrator
        self.run_id = run_id

    def snapshot(self) -> dict[str, Any]:
        return self._orchestrator.run_snapshot(self.run_id)

    def progress_since(self, step: int) -> list[dict[str, Any]]:
        return self._orchestrator.run_progress_since(self.run_id, step)

    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        return self._orchestrator.subscribe(callback)


def _shutdown_at_exit(ref: "weakref.ref[Orchestrator]") -> Callable[[], None]:
    """An atexit hook that ends a live worker instead of letting multiprocessing wait for
    it to finish training (it joins non-daemon children at exit)."""

    def hook() -> None:
        orchestrator = ref()
        if orchestrator is not None:
            orchestrator.shutdown()

    return hook
