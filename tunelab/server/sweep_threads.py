"""The sweeps this server runs: one thread each, the server's claim on it in the history,
and resuming at start-up the sweeps the server was running when it died.

A sweep started here (POST /api/sweeps) is claimed for this server's identity
(tunelab/orchestrator/identity.py) and the key that started it (store migration 11). The
claim is dropped when the sweep finishes its budget or is stopped (POST
/api/sweeps/{id}/stop); it is kept when the server ends while the sweep runs (a shutdown,
a crash, kill -9), so the next start of the same home resumes it (`resume_claimed`) with
the same owner and role rules: its runner closes the trial that was cut short (never
counted) and carries on from the trials it had. A sweep another live server runs is never
taken; one whose server has gone silent may be started again here by a POST.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from tunelab.store import sweeps as table
from tunelab.sweeps.spec import SweepSpec

log = logging.getLogger("tunelab.server")
_LOCK = threading.Lock()  # guards each app's table of sweep threads


@dataclass
class LiveSweep:
    runner: Any
    thread: threading.Thread
    stopped: bool = False


def live_sweeps(state: Any) -> dict[str, LiveSweep]:
    """This server's running sweeps by name (a copy)."""
    with _LOCK:
        return {name: live for name, live in _table(state).items() if live.thread.is_alive()}


def server_id(state: Any) -> str | None:
    """This server's identity; None for an app given an orchestrator without one (tests in process)."""
    identity = getattr(state.orchestrator, "identity", None)
    return getattr(identity, "id", None)


def start(state: Any, spec: SweepSpec, started_by: str | None, prepare: Callable[[Any], Any],
          refuse: Callable[[str], None]) -> int:
    """Run `spec` in a thread of this server, its trials owned by `started_by`; returns its id.
    `refuse(why)` raises when the sweep runs here already or on another live server."""
    from tunelab.sweeps.runner import SweepRunner

    with _LOCK:
        live = _table(state)
        if spec.name in live and live[spec.name].thread.is_alive():
            refuse(f"sweep {spec.name!r} is running on this server already")
        runner = SweepRunner(state.store, state.orchestrator, spec, owned_by=started_by, prepare=prepare)
        me = server_id(state)
        if me is not None:
            others = state.store.live_servers(state.orchestrator.silent_after_s) - {me}
            holder = table.claim_sweep(state.store, runner.sweep_id, me, started_by, others)
            if holder is not None:
                refuse(f"sweep {spec.name!r} is running on the live server {holder!r}; stop it there first")
        entry = LiveSweep(runner, threading.Thread(target=_run, args=(state, spec.name), daemon=True,
                                                   name=f"tunelab-sweep-{runner.sweep_id}"))
        live[spec.name] = entry
        entry.thread.start()
    return runner.sweep_id


def stop(state: Any, name: str) -> bool:
    """Stop this server's sweep `name` (its running trials stop and save, not counted); False if it runs not here."""
    with _LOCK:
        entry = _table(state).get(name)
        if entry is None or not entry.thread.is_alive():
            return False
        entry.stopped = True
    entry.runner.stop()
    return True


def resume_claimed(state: Any, prepare_for: Callable[[str, str | None], Callable[[Any], Any] | None]) -> list[int]:
    """Start again the sweeps this server was running when it last ended; their ids.
    `prepare_for(role, key_name)` gives the trial-config check for the key that started it; a sweep whose key is no
    longer active (`role_of` finds none) is released, not resumed, and the log says so."""
    from tunelab.sweeps.spec import check_sweep

    me = server_id(state)
    if me is None:
        return []
    resumed = []
    for sweep in table.claimed_by(state.store, me):
        role = _role_of(state.store, sweep["started_by"])
        if role is None:
            log.warning("sweep %s (%s) is not resumed: the key %r that started it is revoked", sweep["id"],
                        sweep["name"], sweep["started_by"])
            table.release_sweep(state.store, sweep["id"], me)
            continue
        try:
            spec = check_sweep(sweep["spec"])
            start(state, spec, sweep["started_by"], prepare_for(role, sweep["started_by"]), _raise)
        except Exception:  # one sweep that cannot start again must not keep the server from starting
            log.exception("sweep %s (%s) could not be resumed; POST it again to retry", sweep["id"], sweep["name"])
            continue
        log.warning("sweep %s (%s) resumed: this server was running it when it last ended", sweep["id"], sweep["name"])
        resumed.append(sweep["id"])
    return resumed


def _role_of(store: Any, key_name: str | None) -> str | None:
    if key_name is None:
        return "admin"  # the home's token
    active = {k["name"]: k["role"] for k in store.list_api_keys() if k["revoked_at"] is None}
    return active.get(key_name)


def _raise(why: str) -> None:
    raise RuntimeError(why)


def _table(state: Any) -> dict[str, LiveSweep]:
    """This server's sweep threads by sweep name (call with _LOCK held)."""
    if not hasattr(state, "sweeps"):
        state.sweeps = {}
    return state.sweeps


def _run(state: Any, name: str) -> None:
    with _LOCK:
        entry = _table(state)[name]
    runner = entry.runner
    try:
        runner.run()
    except Exception:  # a sweep thread must not die silently: its trials stay in the history
        log.exception("sweep %s ended with an error", runner.sweep_id)
    # A sweep that ended because this server is shutting down stays claimed: the next start resumes it.
    if entry.stopped or not getattr(state.orchestrator, "closed", False):
        me = server_id(state)
        if me is not None:
            table.release_sweep(state.store, runner.sweep_id, me)
