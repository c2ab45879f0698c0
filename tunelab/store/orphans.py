"""Closing runs whose training process is gone (a previous server life, a killed `tunelab train`)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from tunelab.store.schema import ON_HOST, host_params

log = logging.getLogger(__name__)
ORPHAN_MESSAGE = "server restarted during training"


class OrphansMixin:
    """Orphan rows at start-up. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry`,
    RunsMixin's finalize_run and MetricsMixin's get_metrics."""

    def close_orphans(self, checkpoint_finder: Callable[[str], Any],
                      owner_is_alive: Callable[[str | None], bool] = lambda _lock: False,
                      host: str | None = None) -> list[int]:
        """Close rows left `running` by a process that is gone (a previous server life, a
        killed `tunelab train`): `owner_is_alive(owner_lock)` says whether a row's owner
        still holds its lock, and such rows are left to their owner. A cancelled run ends
        `stopped` and is not resumable; any other ends `error`, resumable only when
        `checkpoint_finder(output_dir)` finds a valid checkpoint. Returns the closed ids.
        With `host` (servers of several machines sharing one database), only that machine's
        rows are looked at: owner locks are files on the machine that trains, so another
        machine's runs are its own server's to close.
        Call once at start-up, before this server starts a run of its own."""
        sql = "SELECT id, output_dir, cancel_requested, owner_lock FROM runs WHERE status = 'running'"
        params = host_params(host) if host is not None else ()
        rows = self._retry(lambda c: c.execute(sql + (f" AND {ON_HOST}" if params else ""), params).fetchall(),
                           write=False)
        closed = []
        for run_id, output_dir, cancelled, owner_lock in rows:
            if owner_is_alive(owner_lock):
                log.info("run %s is still trained by a live process; leaving it running", run_id)
                continue
            found = None
            if output_dir and not cancelled:
                try:
                    found = checkpoint_finder(output_dir)
                except Exception:
                    log.warning("checking %s for checkpoints failed; run %s stays unresumable", output_dir, run_id, exc_info=True)
            history = self.get_metrics(run_id)
            losses = [m["loss"] for m in history if m["loss"] is not None]
            elapsed = [m["elapsed_seconds"] for m in history if m["elapsed_seconds"] is not None]
            if self.finalize_run(
                run_id,
                status="stopped" if cancelled else "error",
                final_step=history[-1]["step"] if history else None,
                final_loss=losses[-1] if losses else None,
                duration_seconds=max(elapsed) if elapsed else None,
                output_dir=output_dir,
                error_message=None if cancelled else ORPHAN_MESSAGE,
                loss_sparkline=losses,
                resume_blocked=found is None,
            ):
                closed.append(run_id)
        return closed
