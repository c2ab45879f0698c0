"""Prewarmed workers: one spawned child that has done its heavy imports and waits for a job.

A cold worker spends most of its first seconds importing torch, transformers, peft, trl
and datasets (5-7 s on two CPU cores) before it can even open the model. `WarmWorkers`
keeps one child that has already paid for those imports, so a start only has to hand
it the job. Each run still gets its own fresh process: a warm child takes exactly one
job, and the next warm child is a new process.

What keeps a warm child equivalent to a cold one:
- Queues can only be given to a process when it is created, so the warm child is born
  with its own event and stop queues; they become the run's queues at hand-over.
- Its environment is fixed at creation and applied before any import: the GPU choice a
  run without `gpu_ids` would get (importing torch does not initialise CUDA, but a
  library imported later might, after which CUDA_VISIBLE_DEVICES is ignored). A job is
  handed over only if the run's environment equals the child's and the parent's own
  environment has not changed since the child started; any other run is cold-spawned
  (so is the download-stall retry, which needs HF_HUB_DISABLE_XET from the start).
- It ignores Ctrl-C (the parent decides its fate), exits when its parent dies (it polls
  its parent id, and its job pipe reads end-of-file) and is terminated when the
  orchestrator shuts down or retires it (`retire`: a server nobody uses keeps none,
  server/warm_on_use.py); until it has a job it holds nothing worth saving.

A replacement is started when the run that took the warm child has ended, not while it
trains: on a small machine a background import would take a core from the very run it
is meant to follow, and the next run cannot start before this one ends anyway.
`TUNELAB_PREWARM=0` turns prewarming off wherever it would be on by default.
"""

from __future__ import annotations

import importlib
import logging
import os
import platform
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Callable, Sequence

from tunelab.orchestrator.bare_main import main_not_rerun
from tunelab.orchestrator.child import TERMINATE_WAIT_S, WorkerHandle, child_main, hide_server_secrets

log = logging.getLogger("tunelab.orchestrator")

PREWARM_ENV = "TUNELAB_PREWARM"
PARENT_POLL_S = 0.5
READY = "ready"
# "module" or "module:attribute,attribute": transformers and trl load lazily, so only
# touching the classes a run uses really imports their code.
TORCH_PRELOAD = (
    "torch",
    "tunelab.worker.bnb_import",  # before anything imports peft, which imports bitsandbytes
    "datasets",
    "transformers:AutoModelForCausalLM,AutoTokenizer,Trainer,TrainerCallback,PrinterCallback",
    "transformers.models.llama.modeling_llama",  # the family most runs (and the demo) use
    "peft:LoraConfig,get_peft_model",
    "trl:SFTTrainer,SFTConfig",
    "tunelab.worker.entry",
    "tunelab.worker.backends.torch_backend",
    "tunelab.worker.model_setup",
    "tunelab.worker.trainer_setup",
    "tunelab.worker.callbacks",
)
MLX_PRELOAD = ("mlx.core", "mlx_lm", "datasets", "tunelab.worker.entry", "tunelab.worker.backends.mlx.train")
_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def prewarm_wanted(default: bool) -> bool:
    """TUNELAB_PREWARM=0/1 (also no/yes, off/on) overrides `default`."""
    raw = (os.environ.get(PREWARM_ENV) or "").strip().lower()
    if raw in _FALSE:
        return False
    if raw in _TRUE:
        return True
    if raw:
        log.warning("%s=%r is not 0 or 1; prewarming stays %s", PREWARM_ENV, raw, "on" if default else "off")
    return default


def default_preload() -> tuple[str, ...]:
    """What the default backend of this machine imports (see RunConfig.resolved_backend)."""
    apple = platform.system() == "Darwin" and platform.machine() == "arm64"
    return MLX_PRELOAD if apple else TORCH_PRELOAD


def preload(modules: Sequence[str]) -> None:
    """Import what a run will import. A failure is left for the run itself to report."""
    for spec in modules:
        name, _, attributes = spec.partition(":")
        try:
            module = importlib.import_module(name)
            for attribute in filter(None, attributes.split(",")):
                getattr(module, attribute)
        except Exception:  # noqa: BLE001 - e.g. a backend that is not installed
            continue


def _exit_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # re-parented: the orchestrator is gone

    threading.Thread(target=watch, name="tunelab-warm-parent-watch", daemon=True).start()


def warm_child_main(env: dict[str, str], modules: Sequence[str], conn: Any, events: Any, stops: Any) -> None:
    """The warm child: environment, imports, then one job (or none) and the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hide_server_secrets()
    os.environ.update(env)
    from tunelab.worker.entry import QUIET_ENVIRONMENT  # torch-free; the libraries read these at import

    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    _exit_with_parent()
    preload(modules)
    try:
        conn.send(READY)
    except OSError:
        pass  # the job came while we were importing and the parent has hung up: it is in the pipe
    try:
        job = conn.recv()
    except (EOFError, OSError):
        os._exit(0)  # retired, or the parent is gone
    conn.close()
    if job is None:
        os._exit(0)
    target, payload = job
    child_main(target, {}, payload, events, stops)


@dataclass
class _WarmChild:
    process: Any
    conn: Any
    events: Any
    stops: Any
    env: dict[str, str]
    parent_env: dict[str, str]
    ready: bool = False

    def fits(self, env: dict[str, str]) -> bool:
        return self.process.is_alive() and env == self.env and dict(os.environ) == self.parent_env

    def poll_ready(self) -> bool:
        if not self.ready:
            try:
                self.ready = self.conn.poll() and self.conn.recv() == READY
            except (EOFError, OSError):
                self.ready = False
        return self.ready


class WarmWorkers:
    """Keeps at most one warm child. Thread-safe; every method returns quickly."""

    def __init__(self, mp_context: BaseContext, env_for_next: Callable[[], dict[str, str]],
                 modules: Sequence[str] | None = None):
        self._mp = mp_context
        self._env_for_next = env_for_next
        self._modules = tuple(default_preload() if modules is None else modules)
        self._lock = threading.Lock()
        self._child: _WarmChild | None = None
        self._closed = False

    def refill(self) -> None:
        """Make sure a fitting warm child exists, in the background."""
        threading.Thread(target=self._refill_now, name="tunelab-prewarm", daemon=True).start()

    def _refill_now(self) -> None:
        try:
            env = self._env_for_next()
        except Exception:  # noqa: BLE001 - GPU listing is best effort; runs still cold-spawn
            log.exception("could not work out the environment for a prewarmed worker")
            return
        stale = None
        with self._lock:
            if self._closed or (self._child is not None and self._child.fits(env)):
                return
            stale, self._child = self._child, None
            try:
                self._child = self._spawn(env)
            except Exception:  # noqa: BLE001 - prewarming is an optimisation, never a failure
                log.exception("could not start a prewarmed worker; runs start cold")
        _retire(stale)

    def _spawn(self, env: dict[str, str]) -> _WarmChild:
        events, stops = self._mp.Queue(), self._mp.Queue()
        parent_end, child_end = self._mp.Pipe()
        snapshot = dict(os.environ)
        process = self._mp.Process(target=warm_child_main, args=(env, self._modules, child_end, events, stops),
                                   name="tunelab-worker-warm")
        with main_not_rerun(f"{__name__}:warm_child_main"):  # as for any worker (bare_main.py)
            process.start()
        child_end.close()
        # As in spawn_worker: the parent never writes events, and must see EOF if the
        # worker dies mid-message; the stop queue's feeder must not hold up our exit.
        events._writer.close()
        stops.cancel_join_thread()
        log.info("prewarmed worker pid %s started", process.pid)
        return _WarmChild(process=process, conn=parent_end, events=events, stops=stops, env=dict(env),
                          parent_env=snapshot)

    def take(self, target: str, payload: dict[str, Any], env: dict[str, str]) -> WorkerHandle | None:
        """Hand a job to the warm child if it fits this run; None means spawn cold."""
        with self._lock:
            child = self._child
            if child is None or not child.fits(env):
                return None
            self._child = None
        try:
            child.conn.send((target, payload))
        except (OSError, ValueError) as exc:  # it died between the check and the hand-over
            log.warning("the prewarmed worker could not take the run (%s); starting one cold", exc)
            _retire(child)
            return None
        child.conn.close()
        return WorkerHandle(process=child.process, events=child.events, stops=child.stops, env=child.env)

    def status(self) -> dict[str, Any]:
        """{"pid": the waiting child's pid or None, "ready": True once its imports are done}."""
        with self._lock:
            child = self._child
            if child is None:
                return {"pid": None, "ready": False}
            return {"pid": child.process.pid, "ready": child.poll_ready()}

    def retire(self) -> None:
        """End the waiting child; a later `refill` starts another."""
        with self._lock:
            child, self._child = self._child, None
        _retire(child)

    def close(self) -> None:
        """No more warm children; end the waiting one."""
        with self._lock:
            self._closed = True
            child, self._child = self._child, None
        _retire(child)


def _retire(child: _WarmChild | None) -> None:
    """End a warm child that will never get a job. It holds no run, so a signal is fine."""
    if child is None:
        return
    child.conn.close()
    child.stops.close()
    if child.process.is_alive():
        child.process.terminate()
        child.process.join(TERMINATE_WAIT_S)
    if child.process.is_alive():
        child.process.kill()
        child.process.join(TERMINATE_WAIT_S)
