"""The queue side of the Orchestrator: queueing a start whose devices are busy, and the
scheduler thread that starts queued runs when their turn and devices come.

`QueueRunner` is mixed into `Orchestrator` (core.py), whose state it shares: the store,
the start lock, the runs it trains (`_runs`), the plans of runs it queued with their
secrets (`_waiting`) and `_launch` (starting.py), which starts a plan on free devices.
Placement is scheduler.py's. A queued run is a `queued` row of the server that accepted
it (identity.py): that server starts it, from its memory (with its secrets) or, after a
restart, from the stored config with secrets from the environment. Another server never
ends or takes it while its server's heartbeat is live; once that heartbeat has been silent
past the bound, a server whose machine can read the run's files (recovery.py) claims it
(atomically, in the store), and a secret missing there ends it `error`, resumable with
the secret given again. Running runs of a silent server are closed here too.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from tunelab import events as ev
from tunelab import hardware, layout
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.config.resume import resume_config, stored_settings
from tunelab.orchestrator.errors import PersistError
from tunelab.orchestrator.memory_check import fit_memory
from tunelab.orchestrator.recovery import cannot_run_here, output_dir_here
from tunelab.orchestrator.resume import check_world_size
from tunelab.orchestrator.scheduler import POLL_S, PlannedStart, as_if_idle, device_request, place
from tunelab.store import DuplicateStartRequest, InvalidValue, StoreError

log = logging.getLogger("tunelab.orchestrator")
# Finished runs kept in memory (live state, histories, replayable progress) besides the newest.
KEEP_FINISHED = 8


class QueueRunner:
    """Queueing and starting queued runs; see the module docstring for what it shares."""

    def queue_position(self, run_id: int) -> int | None:
        """Where a queued run stands (1 = next to start); None when it is not queued."""
        return next((r["queue_position"] for r in self.store.queued_runs() if r["id"] == run_id), None)

    def _check_for_later(self, plan: PlannedStart, gpus: list[hardware.Gpu]) -> None:
        """What a start checks once it knows its devices, checked now against the devices
        it would get on an idle machine, so a queued run does not fail later on something
        a start refuses up front (free memory, which depends on what runs then, excepted)."""
        idle = as_if_idle(gpus)
        chosen = place(plan.cfg, idle, set()) or []
        env = {"CUDA_VISIBLE_DEVICES": ",".join(g.pin for g in chosen)} if chosen else {}
        planned = layout.plan(plan.cfg.model_dump(), layout.visible_gpu_count(env))
        fit_memory(plan.cfg, chosen, planned.world_size, planned.processes_per_node)
        if plan.resume_from is not None:
            check_world_size(plan.resume_from, planned.world_size)

    def _queue_has_runs(self) -> bool:
        """Whether runs this server may start wait (another live server's wait for that server)."""
        rows = self.store.queued_runs()
        others_live = self._others_live(rows)
        return any(r.get("server_id") not in others_live for r in rows)

    def _others_live(self, rows: list[dict[str, Any]]) -> set[str]:
        """The other servers owning some of `rows` whose heartbeat is live."""
        others = {r.get("server_id") for r in rows} - {None, self.identity.id}
        return self.store.live_servers(self.silent_after_s) & others if others else set()

    def _enqueue(self, plan: PlannedStart) -> int:
        """Record the run as queued; the scheduler starts it when its turn and devices come."""
        cfg = plan.cfg
        public = self._public(plan, cfg)
        try:
            modality = (self.store.get_run(plan.resumed_from) or {}).get("modality") if plan.resumed_from else None
            run_id = self.store.create_run(public, cfg.model_name, cfg.dataset_label, cfg.display_name, plan.resumed_from,
                                           start_request_id=plan.start_request_id, modality=modality,
                                           owned_by=plan.owned_by, queued=True, device_request=device_request(cfg),
                                           server_id=self.identity.id)
            self.store.set_output_dir(run_id, public["output_dir"])
        except DuplicateStartRequest as exc:
            return exc.run_id
        except InvalidValue as exc:
            raise ConfigError.single(exc.field, str(exc).split(": ", 1)[-1]) from None
        except Exception as exc:
            raise PersistError(f"the run could not be recorded in the database ({exc}); nothing was queued") from exc
        if plan.resume_run_id is not None:
            self._record_resume(plan.resume_run_id, run_id, on_failure=lambda why: self._fail_queued(run_id, why))
        with self._lock:  # not the current run (`_latest`): that is one that trains, never a queued one
            self._waiting[run_id] = plan
        position = self.queue_position(run_id)
        log.info("run %s: queued at position %s", run_id, position)
        self._notify({**ev.status(f"queued at position {position}: waiting for its devices"), "run_id": run_id,
                      "queue_position": position})
        self._wake.set()
        return run_id

    def _schedule_loop(self) -> None:
        while not self._closed:
            try:
                self._close_silent_servers_runs()
                self.start_queued()
            except StoreError as exc:
                if "closed" in str(exc):
                    return  # the store went away with its owner
                log.warning("the queue could not be read: %s", exc)
            except Exception:
                log.exception("starting queued runs failed; trying again shortly")
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _close_silent_servers_runs(self) -> None:
        """Close the running runs of servers whose heartbeat has gone silent (identity.py)."""
        closed = self.store.close_orphans(latest_valid_checkpoint, server_id=self.identity.id,
                                          silent_after_s=self.silent_after_s, only_silent_servers=True)
        if closed:
            log.warning("closed run(s) %s of a server silent for over %g s", ", ".join(map(str, closed)),
                        self.silent_after_s)

    def start_queued(self) -> list[int]:
        """Start queued runs, in queue order, while their devices are free; returns their ids.
        Only this server's runs, and those of servers silent past the bound that this
        machine can run: another live server's queued run is its own to start or end."""
        started: list[int] = []
        with self._start_lock:
            rows = self.store.queued_runs() if not self._closed else []
            others_live = self._others_live(rows)
            waiting_ids = {r["id"] for r in rows}
            self._not_here = {i: seen for i, seen in self._not_here.items() if i in waiting_ids}
            for row in rows:
                owner = row.get("server_id")
                if owner in others_live:
                    continue  # another live server's run, out of this server's order
                plan = self._plan_for(row) if owner in (None, self.identity.id) else self._take_over(row)
                if plan is None:
                    continue  # it could not be rebuilt and was ended with the reason, or cannot run here
                if place(plan.cfg, hardware.list_gpus(), self._busy()) is None:
                    break  # strict order: the runs behind it wait too
                with self._lock:
                    self._spawning = True
                try:
                    run_id = self._launch(plan, may_wait=True, queued_id=row["id"])
                except Exception as exc:  # a check that depends on the moment (free memory) refused it
                    self._fail_queued(row["id"], str(exc))
                    continue
                finally:
                    with self._lock:
                        self._spawning = False
                if run_id is None and self.store.get_run(row["id"]) and self.store.get_run(row["id"])["status"] == "queued":
                    break  # a device is held by another process on this home: wait
                if run_id is not None:
                    started.append(run_id)
        return started

    def _plan_for(self, row: dict[str, Any]) -> PlannedStart | None:
        """The start one of this server's queued rows stands for: the one queued here (with
        its secrets), or one an earlier life of this server queued, rebuilt from the stored
        config with secrets from the environment."""
        with self._lock:
            plan = self._waiting.get(row["id"])
        if plan is not None:
            return plan
        config = row["config"]
        try:
            cfg = resume_config({**config, "resume_from": None}, None, os.environ)
        except ConfigError as exc:
            self._fail_queued(row["id"], "it waited in the queue across a server restart, and tunelab never stores "
                                         f"secrets: {exc.errors[0].message}", resumable=True)
            return None
        except Exception as exc:
            self._fail_queued(row["id"], f"its stored settings no longer make a valid run: {exc}")
            return None
        resume_from = config.get("resume_from")
        return PlannedStart(cfg, Path(row["output_dir"] or config["output_dir"]), Path(resume_from) if resume_from else None,
                            row.get("resumed_from_run_id"), None, row.get("start_request_id"), row.get("owner"))

    def _take_over(self, row: dict[str, Any]) -> PlannedStart | None:
        """The start a queued row of a silent server stands for here (recovery.py): None
        while this machine cannot read what it trains on (it stays queued for a server
        that can); ended `error`, resumable, when a secret it used is not in this
        server's environment."""
        run_id, config = row["id"], row["config"]
        checked = self._not_here.get(run_id)
        if checked is not None and time.monotonic() - checked < self.silent_after_s:
            return None
        resume_from = config.get("resume_from")
        try:
            public = parse_config(stored_settings({**config, "resume_from": None}))
        except Exception as exc:
            self._fail_queued(run_id, f"its stored settings no longer make a valid run: {exc}")
            return None
        problem = cannot_run_here(public, resume_from)
        if problem is not None:
            self._not_here[run_id] = time.monotonic()
            log.info("run %s: its server %s is silent, but this machine cannot run it (%s); it stays queued",
                     run_id, row.get("server_id"), problem)
            return None
        self._not_here.pop(run_id, None)
        output_dir = output_dir_here(row.get("output_dir") or config.get("output_dir"), public,
                                     lambda folder: bool(self.store.runs_sharing_output_dir(folder)))
        if str(output_dir) != row.get("output_dir"):
            self.store.set_output_dir(run_id, output_dir)
        try:
            cfg = resume_config({**config, "resume_from": None}, None, os.environ)
        except ConfigError as exc:
            self._fail_queued(run_id, f"its server {row.get('server_id')} went silent and this server "
                                      f"({self.identity.host}) cannot take it over: "
                                      + "; ".join(e.message for e in exc.errors), resumable=True)
            return None
        log.warning("run %s: taking it over from server %s, silent for over %g s", run_id, row.get("server_id"),
                    self.silent_after_s)
        return PlannedStart(cfg, output_dir, Path(resume_from) if resume_from else None, row.get("resumed_from_run_id"),
                            None, row.get("start_request_id"), row.get("owner"))

    def _fail_queued(self, run_id: int, reason: str, *, resumable: bool = False) -> None:
        """End a queued run that cannot start, as an error saying why (nothing was spawned);
        `resumable`: a resume that brings what was missing starts it afresh."""
        log.warning("run %s: cannot start from the queue: %s", run_id, reason)
        with self._lock:
            self._waiting.pop(run_id, None)
        if self.store.claim_queued(run_id, self.instance_id, [], server_id=self.identity.id):
            self.store.finalize_run(run_id, status="error", error_message=reason, resume_blocked=not resumable)
            self._notify({**ev.make(ev.ERROR), "run_id": run_id, "final": True, "status": "error",
                          "status_message": reason, "error": reason, "resume_blocked": not resumable, "output_dir": None,
                          "final_step": None, "final_loss": None, "total_steps": None})

    def _run_ended(self, run_id: int) -> None:
        """A run was finalized and let go of its devices: the next queued run may start."""
        with self._lock:
            finished = [i for i, r in self._runs.items() if r.finalized and i != self._latest]
            for old in finished[:-KEEP_FINISHED] if len(finished) > KEEP_FINISHED else []:
                del self._runs[old]
        self._wake.set()

    def cancel_queued(self, run_id: int) -> bool:
        """Withdraw a queued run (status `cancelled`, nothing spawned); False when it is not queued."""
        if not self.store.cancel_queued(run_id):
            return False
        with self._lock:
            self._waiting.pop(run_id, None)
        log.info("run %s: cancelled while queued", run_id)
        self._notify({**ev.make(ev.COMPLETE), "run_id": run_id, "final": True, "status": "cancelled",
                      "status_message": "cancelled while queued", "error": None, "resume_blocked": True,
                      "output_dir": None, "final_step": None, "final_loss": None, "total_steps": None})
        self._wake.set()
        return True
