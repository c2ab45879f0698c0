"""The Orchestrator: the one object that starts runs and answers for the active one.

It validates a start completely before anything happens, runs the optional
`before_spawn` hook, chooses GPUs, claims the run's devices and owner lock (refused
while another process trains on them, see ownership.py), creates the history row and
spawns the worker; from then on the run's own `ActiveRun` (pump, watchdog, finalize)
carries it to its end. `stop_for_shutdown` is what SIGTERM and SIGHUP mean to the
server and the CLI.
Surfaces (HTTP server, CLI) use only the methods below; see docs/ARCHITECTURE.md.
The parent never imports torch & co: the worker is named by a dotted path and only
the child imports it.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import threading
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
from tunelab.orchestrator.gpus import auto_gpu_env, choose_gpus, gpu_env
from tunelab.orchestrator.memory_check import fit_memory
from tunelab.orchestrator.prechecks import check_before_start
from tunelab.orchestrator.prewarm import WarmWorkers, prewarm_wanted
from tunelab.orchestrator.resume import check_resumable, check_world_size, resolve_resume_from
from tunelab.orchestrator.run import ActiveRun
from tunelab.orchestrator.state import ProgressState
from tunelab.plots import loss_plot_png, plot_title
from tunelab.store import AlreadyResumed, DuplicateStartRequest, InvalidValue, Store

log = logging.getLogger("tunelab.orchestrator")

CANCEL_PERSIST_ATTEMPTS = 3


class Orchestrator:
    def __init__(self, store: Store, *, worker_target: str | Callable[..., Any] = DEFAULT_WORKER,
                 before_spawn: Callable[[], Any] | None = None, mp_context: str = "spawn",
                 prewarm: bool | Sequence[str] | None = None):
        """`prewarm`: keep one worker with its heavy imports done, waiting for the next run
        (see prewarm.py). True preloads the default backend's libraries, a list of module
        names preloads those, None follows TUNELAB_PREWARM (off when unset)."""
        if mp_context == "fork":
            raise ValueError("mp_context='fork' is not allowed: each run needs fresh CUDA state and fresh imports; use 'spawn'")
        self.store = store
        self._target = target_name(worker_target)
        self._before_spawn = before_spawn
        self._mp = multiprocessing.get_context(mp_context)
        # Serialises starts (and stops against a start in progress): a second start with
        # the same request id waits, then finds the run the first one created.
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()  # guards the fields below
        self._run: ActiveRun | None = None
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

    # --- starting -----------------------------------------------------------------------
    def start(self, config: RunConfig | dict[str, Any], *, resume_run_id: int | None = None,
              start_request_id: str | None = None, owned_by: str | None = None) -> int:
        """Start a run and return its id; raises before anything happens if it cannot run.
        `owned_by`: the API key that asked (recorded as the run's owner; never in its config)."""
        cfg = config if isinstance(config, RunConfig) else parse_config(config)
        with self._start_lock:
            if self._closed:
                raise RunActive("tunelab is shutting down; no new runs can start")
            if start_request_id is not None:
                known = self._run_for_request(start_request_id)
                if known is not None:
                    return known
            self._refuse_if_busy()
            check_machine(cfg, hardware.cuda_device_count())
            if self._target == DEFAULT_WORKER:  # a substituted worker (tests' fakes) reads no files
                check_before_start(cfg)
            label = cfg.display_name or Path(cfg.model_name).name or cfg.model_name
            output_dir = paths.resolve_output_dir(cfg.output_dir, label, cfg.allow_output_outside_root)
            resume_from, resumed_from = resolve_resume_from(self.store, cfg.resume_from, resume_run_id)
            if cfg.output_dir:
                self._refuse_foreign_folder(output_dir, resumed_from)
            with self._lock:
                self._spawning = True
            try:
                return self._spawn_run(cfg, output_dir, resume_from, resumed_from, resume_run_id, start_request_id,
                                       owned_by)
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
            raise PersistError(f"the run database cannot be read ({exc}); nothing was started, try again") from exc
        return known["id"] if known is not None else None

    def _refuse_if_busy(self) -> None:
        run = self._run
        if run is None:
            return
        if not run.finalized or run.worker_alive():
            raise RunActive(f"run {run.run_id} is active; stop it or wait for it to finish")
        pump = run.pump_thread()
        if pump is not None and pump.is_alive():
            raise RunActive(f"run {run.run_id} is still finishing; try again in a moment")

    def _spawn_run(self, cfg: RunConfig, output_dir: Path, resume_from: Path | None, resumed_from: int | None,
                   resume_run_id: int | None, start_request_id: str | None, owned_by: str | None = None) -> int:
        self._call_before_spawn()
        chosen = choose_gpus(cfg, hardware.list_gpus())  # after the hook: it may just have freed GPU memory
        env = gpu_env(cfg, chosen)
        planned = layout.plan(cfg.model_dump(), layout.visible_gpu_count(env))
        cfg, memory_notes = fit_memory(cfg, chosen, planned.world_size, planned.processes_per_node)
        public = {**cfg.public(), SECRETS_USED_KEY: cfg.secret_names(), "output_dir": str(output_dir),
                  "resume_from": str(resume_from) if resume_from else None}
        payload = {**cfg.worker_payload(), "output_dir": str(output_dir), "resume_from": str(resume_from) if resume_from else None}
        if resume_from is not None:  # the world size is known only now, from the GPUs just chosen
            check_world_size(resume_from, layout.plan(payload, layout.visible_gpu_count(env)).world_size)
        # Before the row exists: a refused start leaves nothing behind, and a row is never
        # `running` without its owner holding the lock that says so.
        claim = ownership.RunClaim(paths.locks_dir(self.store.path), ownership.devices_of(env))
        try:
            run_id, modality = self._create_row(cfg, public, resumed_from, start_request_id, claim, owned_by)
        except DuplicateStartRequest as exc:  # another process took this request id first
            claim.release()
            return exc.run_id
        except BaseException:
            claim.release()
            raise
        claim.record_run(run_id)
        run = ActiveRun(run_id=run_id, cfg=cfg, payload=payload, env=env, target=self._target, mp_context=self._mp,
                        store=self.store, output_dir=output_dir, notify=self._notify, warm=self._warm, claim=claim,
                        modality=modality)
        with self._lock:
            self._run = run
        for note in memory_notes:  # what the memory check changed or warns of, in the run's own events
            run.apply(ev.status(note))
        if resume_run_id is not None:
            try:
                # check_resumable (just now, under the start lock) found any earlier continuation void.
                void = (self.store.get_run(resume_run_id) or {}).get("resumed_by_run_id")
                self.store.mark_resumed(resume_run_id, run_id, replacing=void)
            except AlreadyResumed as exc:
                run.finish(failure=str(exc))
                raise NotResumable(resume_run_id, f"it was already resumed as run {exc.by_run_id}") from None
            except Exception as exc:
                run.finish(failure=f"could not record that it resumes run {resume_run_id}: {exc}")
                raise PersistError(f"the resume could not be recorded ({exc}); nothing was started") from exc
        try:
            run.spawn()
        except Exception as exc:
            log.exception("run %s: the worker could not be started", run_id)
            run.finish(failure=f"could not start the worker process: {exc}")
            return run_id
        run.start_pump()
        return run_id

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
                    owned_by: str | None = None) -> tuple[int, str | None]:
        """The run's row, and its modality when already known: a resumed run trains on what
        its parent trained on, and says so before its worker does."""
        owner = {"lock": claim.owner_lock, "pid": claim.pid, "started_at": claim.started_at}
        try:
            modality = (self.store.get_run(resumed_from) or {}).get("modality") if resumed_from is not None else None
            run_id = self.store.create_run(public, cfg.model_name, cfg.dataset_label, cfg.display_name, resumed_from,
                                           start_request_id=start_request_id, owner=owner, modality=modality,
                                           owned_by=owned_by)
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
        """Stop and save (`save=True`) or cancel the active run."""
        with self._start_lock:  # a start in progress finishes spawning first
            run = self._run
        if run is None or run.finalized:
            raise NoActiveRun("no run is active")
        if expected_run_id is not None and expected_run_id != run.run_id:
            raise RunMismatch(expected_run_id, run.run_id)
        if not save:
            try:
                with_retries(lambda: self.store.mark_cancel_requested(run.run_id), "recording the cancel",
                             attempts=CANCEL_PERSIST_ATTEMPTS)
            except Exception as exc:
                raise PersistError(f"the cancel could not be recorded ({exc}); the run was not signalled, try again") from exc
        run.request_stop(save)

    def reset(self) -> None:
        """Forget a finished run so the state reads idle again."""
        with self._start_lock:
            self._refuse_if_busy()
            with self._lock:
                self._run = None

    def stop_for_shutdown(self, grace_s: float) -> int | None:
        """What SIGTERM means: start no new run, and have the active run stop at its next
        step boundary and save, finalized within `grace_s` (else it is ended and recorded
        `error`, resumable from its last valid checkpoint). Returns at once, with the id
        of the run that is stopping (None when none was active); `wait_idle` waits."""
        with self._start_lock:  # a start in progress finishes spawning first
            with self._lock:
                self._closed = True
                run = self._run
        if self._warm is not None:
            self._warm.close()  # no next run to warm up for; its memory is better spent on the save
        if run is None or run.finalized:
            return None
        run.stop_for_shutdown(grace_s)
        return run.run_id

    @property
    def closed(self) -> bool:
        """True once the orchestrator is shutting down: it starts no new runs."""
        return self._closed

    def shutdown(self) -> None:
        """End an active worker (recorded as an error, resumable from its checkpoint)."""
        with self._lock:
            self._closed = True
            run = self._run
        atexit.unregister(self._atexit)
        if self._warm is not None:
            self._warm.close()
        if run is not None and not run.finalized:
            run.force_end("shutdown", failure="tunelab shut down during training")
        self.wait_idle(10)

    # --- reading ------------------------------------------------------------------------
    def is_training_active(self) -> bool:
        with self._lock:
            run, spawning = self._run, self._spawning
        return spawning or (run is not None and (not run.finalized or run.worker_alive()))

    def prewarm_status(self) -> dict[str, Any]:
        """{"enabled", "pid", "ready"}: the worker waiting for the next run, if any."""
        if self._warm is None:
            return {"enabled": False, "pid": None, "ready": False}
        return {"enabled": True, **self._warm.status()}

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            run = self._run
        if run is None:
            data = {**ProgressState().as_dict(), "run_id": None, "started_at": None, "model_name": None,
                    "dataset_name": None, "display_name": None, "final_loss": None, "worker_pid": None,
                    "world_size": None}
        else:
            run.ensure_pump()
            data = run.snapshot()
        data["is_training_running"] = self.is_training_active()
        return data

    def metrics(self) -> dict[str, Any]:
        run = self._run
        if run is None:
            return ProgressState().histories()
        with run.lock:
            return run.state.histories()

    def progress_since(self, step: int) -> list[dict[str, Any]]:
        run = self._run
        return run.progress_after(step) if run is not None else []

    def plot_png(self, theme: str = "light") -> bytes:
        run = self._run
        snap = self.snapshot()
        secrets = run.cfg.secret_values() if run is not None else []
        history = snap["histories"]
        return loss_plot_png(history["steps"], history["loss"], title=plot_title(snap, secrets), theme=theme,
                             eval_steps=history["eval_steps"], eval_losses=history["eval_loss"])

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the current run is finalized and its pump has finished."""
        run = self._run
        if run is None:
            return True
        if not run.finalizer.done.wait(timeout):
            return False
        pump = run.pump_thread()
        if pump is not None and pump is not threading.current_thread():
            pump.join(timeout)
            return not pump.is_alive()
        return True

    # --- subscribers --------------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call `callback(event)` for each event (from the pump thread; it must not block)."""
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


def _shutdown_at_exit(ref: "weakref.ref[Orchestrator]") -> Callable[[], None]:
    """An atexit hook that ends a live worker instead of letting multiprocessing wait for
    it to finish training (it joins non-daemon children at exit)."""

    def hook() -> None:
        orchestrator = ref()
        if orchestrator is not None:
            orchestrator.shutdown()

    return hook
