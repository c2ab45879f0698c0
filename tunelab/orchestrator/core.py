"""The Orchestrator: the one object that starts runs and answers for them.

It validates a start completely before anything happens; then, when the devices the
run needs are free, runs the optional `before_spawn` hook, chooses GPUs, claims the
run's devices and owner lock (see ownership.py), creates the history row and spawns the
worker; from then on the run's own `ActiveRun` (pump, watchdog, finalize) carries it to
its end. Several runs train at once on disjoint devices. A start whose devices are busy
is queued (a `queued` row; `queue: false` in its config, or an orchestrator made with
`queueing=False` like the CLI's, refuses instead), and the scheduler thread starts queued
runs in order as devices free up (queueing.py; placement in scheduler.py), also those a
previous server life left queued. Several servers may share one history: each has an
identity and a heartbeat (identity.py), and starts only its own queued runs or those of a
server gone silent that it can run (queueing.py). Secrets are never stored: a queued run keeps them in this process's
memory; one picked up after a restart takes them from the environment, or fails
saying which secret to give again.
The methods without a run id (snapshot, stop, metrics, ...) are about the current run:
the newest that trains here (or the last that did), never a queued one; a run started
from the queue becomes current once the current one has ended. The `run_*` methods take
a run id.
`stop_for_shutdown` is what SIGTERM and SIGHUP mean to the server and the CLI.
Surfaces (HTTP server, CLI) use only the public methods; see docs/ARCHITECTURE.md.
This file holds the object's shared state, which devices its runs hold, and the event
fan-out to subscribers; its methods come in parts: starting.py (start, resume),
queueing.py (the queue), stopping.py (stop, cancel, shutdown) and reading.py
(snapshots, metrics, waiting).
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
import weakref
from typing import Any, Callable, Sequence

from tunelab.orchestrator.child import DEFAULT_WORKER, target_name
from tunelab.orchestrator.gpus import auto_gpu_env
from tunelab.orchestrator.identity import Heartbeat, ServerIdentity, load_identity, silent_after_s
from tunelab.orchestrator.prewarm import WarmWorkers, prewarm_wanted
from tunelab.orchestrator.queueing import QueueRunner
from tunelab.orchestrator.reading import RunReader
from tunelab.orchestrator.run import ActiveRun
from tunelab.orchestrator.scheduler import PlannedStart
from tunelab.orchestrator.starting import RunStarter
from tunelab.orchestrator.stopping import RunStopper
from tunelab.store import Store

log = logging.getLogger("tunelab.orchestrator")


class Orchestrator(RunStarter, QueueRunner, RunStopper, RunReader):
    def __init__(self, store: Store, *, worker_target: str | Callable[..., Any] = DEFAULT_WORKER,
                 before_spawn: Callable[[], Any] | None = None, mp_context: str = "spawn",
                 prewarm: bool | Sequence[str] | None = None, prewarm_later: bool = False, queueing: bool = True,
                 identity: ServerIdentity | None = None):
        """`prewarm`: keep one worker with its heavy imports done, waiting for the next run
        (see prewarm.py). True preloads the default backend's libraries, a list of module
        names preloads those, None follows TUNELAB_PREWARM (off when unset).
        `prewarm_later`: the first warm worker waits for `start_prewarm()` (a server calls
        it once it is ready to answer, so the worker's imports do not compete with its own).
        `queueing`: queue starts whose devices are busy and run the history's queue (a
        server); False refuses them instead and leaves the queue alone (the CLI's own run).
        `identity`: the server this is (identity.py; default: the home's). It beats in the
        store from now until shutdown, the CLI's runs included: they are the home's too."""
        if mp_context == "fork":
            raise ValueError("mp_context='fork' is not allowed: each run needs fresh CUDA state and fresh imports; use 'spawn'")
        self.store = store
        self.instance_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.identity = identity or load_identity()
        self.silent_after_s = silent_after_s()
        self._heartbeat = Heartbeat(store, self.identity, self.instance_id, self.silent_after_s)
        self._target = target_name(worker_target)
        self._before_spawn = before_spawn
        self._mp = multiprocessing.get_context(mp_context)
        self._queueing = queueing
        # Serialises starts, queue passes and stops against a start in progress: a second
        # start with the same request id waits, then finds the run the first one created.
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()  # guards the fields below
        self._runs: dict[int, ActiveRun] = {}  # live runs, and the last few finished ones
        self._latest: int | None = None  # the current run (see above): what the run-less methods are about
        self._waiting: dict[int, PlannedStart] = {}  # runs queued here, with their secrets (never stored)
        self._not_here: dict[int, float] = {}  # a silent server's queued runs this machine cannot run: when seen
        self._spawning = False
        self._closed = False
        self._subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._atexit = _shutdown_at_exit(weakref.ref(self))
        atexit.register(self._atexit)
        self._warm: WarmWorkers | None = None
        if prewarm_wanted(False) if prewarm is None else prewarm:
            modules = None if prewarm is None or prewarm is True else list(prewarm)
            self._warm = WarmWorkers(self._mp, auto_gpu_env, modules)
            if not prewarm_later:
                self._warm.refill()
        self._wake = threading.Event()
        self._scheduler: threading.Thread | None = None
        if queueing:  # its first pass picks up what a previous server life left queued
            self._scheduler = threading.Thread(target=self._schedule_loop, name="tunelab-scheduler", daemon=True)
            self._scheduler.start()

    def start_prewarm(self) -> None:
        """Start the first warm worker now (in the background), if prewarming is on. Not
        while a run trains (one the queue started first): its end starts one, as always."""
        if self._warm is not None and not self._live_runs():
            self._warm.refill()

    def retire_prewarm(self) -> None:
        """End the warm worker waiting for the next run (nobody is using the server); the
        next `start_prewarm()` starts another."""
        if self._warm is not None:
            self._warm.retire()

    # --- devices held ------------------------------------------------------------------
    def _live_runs(self) -> list[ActiveRun]:
        with self._lock:
            return [r for r in self._runs.values() if not r.finalized or r.worker_alive()]

    def _own_devices(self) -> set[Any]:
        return {d for run in self._live_runs() for d in run.devices}

    def _busy(self) -> set[Any]:
        """Devices held by this server's live runs and by every running run on this machine in the database."""
        return self._own_devices() | self.store.devices_in_use(host=socket.gethostname())

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


def _shutdown_at_exit(ref: "weakref.ref[Orchestrator]") -> Callable[[], None]:
    """An atexit hook that ends a live worker instead of letting multiprocessing wait for
    it to finish training (it joins non-daemon children at exit)."""

    def hook() -> None:
        orchestrator = ref()
        if orchestrator is not None:
            orchestrator.shutdown()

    return hook
