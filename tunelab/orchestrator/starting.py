"""The start side of the Orchestrator: checking a start, then launching it on its devices.

`RunStarter` is mixed into `Orchestrator` (core.py), whose state it shares. A start is
validated completely before anything happens (the machine, files, output folder, resume
point); a start whose devices are busy goes to the queue (queueing.py) when it may wait.
`_launch` is the one way a run begins, fresh or from the queue: it runs the optional
`before_spawn` hook, places the run (scheduler.py), fits it to memory, claims its devices
and owner lock (ownership.py), creates or claims its row and spawns the worker; from
then on the run's own `ActiveRun` carries it to its end.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from tunelab import events as ev
from tunelab import hardware, layout, paths
from tunelab.config.run_config import SECRETS_USED_KEY, ConfigError, RunConfig, check_machine, parse_config
from tunelab.config.resume import resume_config
from tunelab.orchestrator import ownership
from tunelab.orchestrator.child import DEFAULT_WORKER
from tunelab.orchestrator.errors import NotResumable, PersistError, RunActive
from tunelab.orchestrator.gpus import gpu_env
from tunelab.orchestrator.memory_check import fit_memory
from tunelab.orchestrator.prechecks import check_before_start
from tunelab.orchestrator.resume import check_resumable, check_world_size, resolve_resume_from
from tunelab.orchestrator.run import ActiveRun
from tunelab.orchestrator.scheduler import PlannedStart, device_request, devices_for, place
from tunelab.store import AlreadyResumed, DuplicateStartRequest, InvalidValue

log = logging.getLogger("tunelab.orchestrator")


class RunStarter:
    """Starting and resuming runs; see the module docstring for what it shares."""

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
            gpus = hardware.list_gpus()
            check_machine(cfg, len(gpus), hardware.mig_slices(gpus))
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
        # The run it continues, if any: export_after names a resumed run's export after it.
        payload = {**cfg.worker_payload(), "output_dir": str(plan.output_dir),
                   "resume_from": str(plan.resume_from) if plan.resume_from else None,
                   "resumed_from_run_id": plan.resumed_from}
        if plan.resume_from is not None:  # the world size is known only now, from the GPUs just chosen
            check_world_size(plan.resume_from, planned.world_size)  # memory fitting leaves the layout as planned
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
                if not self.store.claim_queued(queued_id, self.instance_id, devices, owner=owner,
                                               server_id=self.identity.id):
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
            # The current run is the newest that trains: a fresh start, or one from the queue
            # once the current one has ended (a view of a run that still trains stays on it).
            current = self._runs.get(self._latest) if self._latest is not None else None
            if queued_id is None or current is None or current.finalized:
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
                                           claimed_by=self.instance_id, server_id=self.identity.id)
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
