"""Closing runs whose training process is gone (a previous server life, a killed `tunelab train`,
another server whose heartbeat went silent)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from tunelab.store.schema import on_host

log = logging.getLogger(__name__)
ORPHAN_MESSAGE = "server restarted during training"
# A run of another server whose heartbeat went silent (killed, its machine down, cut off).
SILENT_SERVER_MESSAGE = "its server stopped answering during training (its heartbeat went silent)"


class OrphansMixin:
    """Orphan rows at start-up. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry`,
    RunsMixin's finalize_run, MetricsMixin's get_metrics and ServersMixin's live_servers."""

    def close_orphans(self, checkpoint_finder: Callable[[str], Any],
                      owner_is_alive: Callable[[str | None], bool] = lambda _lock: False,
                      host: str | None = None, *, server_id: str | None = None,
                      silent_after_s: float | None = None, only_silent_servers: bool = False) -> list[int]:
        """Close rows left `running` by a process that is gone (a previous server life, a
        killed `tunelab train`): `owner_is_alive(owner_lock)` says whether a row's owner
        still holds its lock, and such rows are left to their owner. A cancelled run ends
        `stopped` and is not resumable; any other ends `error`, resumable only when
        `checkpoint_finder(output_dir)` finds a valid checkpoint. Returns the closed ids.
        Which rows are looked at:
        - with `server_id` (this server's identity, servers.py): its own rows (an earlier
          life of the same server), and the rows of every other server whose heartbeat
          has been silent for `silent_after_s` seconds — never another live server's;
          `only_silent_servers` looks at those silent servers' rows alone (what a live
          server checks from time to time). A silent server's lock files are on its own
          machine, so its rows are closed without asking `owner_is_alive`.
        - rows with no server (from before servers had an identity) and every row when
          `server_id` is None: with `host`, only that machine's (owner locks are files on
          the machine that trains).
        Call once at start-up, before this server starts a run of its own."""
        sql = ("SELECT id, output_dir, cancel_requested, owner_lock, server_id, claimed_by FROM runs"
               " WHERE status = 'running'")
        rows = self._retry(lambda c: c.execute(sql).fetchall(), write=False)
        others = {r[4] for r in rows} - {None, server_id} if server_id is not None else set()
        # Without a bound no other server counts as silent.
        live = self.live_servers(silent_after_s) if others and silent_after_s is not None else others
        chosen = []
        for run_id, output_dir, cancelled, owner_lock, row_server, claimed_by in rows:
            if row_server in others:
                if row_server not in live:
                    log.warning("run %s: its server %s has been silent for over %g s; closing it here",
                                run_id, row_server, silent_after_s)
                    chosen.append((run_id, output_dir, cancelled, SILENT_SERVER_MESSAGE))
                continue
            if only_silent_servers:
                continue
            if host is not None and (server_id is None or row_server != server_id) and not on_host(claimed_by, host):
                continue
            if owner_is_alive(owner_lock):
                log.info("run %s is still trained by a live process; leaving it running", run_id)
                continue
            chosen.append((run_id, output_dir, cancelled, ORPHAN_MESSAGE))
        return self._close_rows(chosen, checkpoint_finder)

    def _close_rows(self, rows: list[tuple[int, str | None, Any, str]], checkpoint_finder: Callable[[str], Any]) -> list[int]:
        closed = []
        for run_id, output_dir, cancelled, message in rows:
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
                error_message=None if cancelled else message,
                loss_sparkline=losses,
                resume_blocked=found is None,
            ):
                closed.append(run_id)
        return closed
