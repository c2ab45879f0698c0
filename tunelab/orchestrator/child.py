"""Starting and ending worker processes, and the tiny trampoline they begin in.

Every worker is a `spawn` child (never fork: each run gets fresh CUDA state and fresh
imports). The worker function travels as a dotted name ("module:function"), not as a
pickled object, so that:
- the parent never imports the worker's module (and its heavy libraries), and
- the child applies its environment (CUDA_VISIBLE_DEVICES, HF_HUB_DISABLE_XET, ...)
  BEFORE the worker's module, and whatever it imports, is loaded.
That is also why the child's environment travels as an argument instead of being set
in `os.environ` around `Process.start()`: the parent's environment is never touched,
so concurrent threads (and later runs) never see another run's variables.
"""

from __future__ import annotations

import importlib
import os
import traceback
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Callable

from tunelab import events as ev
from tunelab.orchestrator.bare_main import main_not_rerun

DEFAULT_WORKER = "tunelab.worker.entry:run_worker"
# How long a terminated worker gets to exit before it is killed.
TERMINATE_WAIT_S = 3.0


def target_name(target: str | Callable[..., Any]) -> str:
    """The "module:qualname" a child can import; refuses targets it could never find."""
    if isinstance(target, str):
        module, _, function = target.partition(":")
        if not module or not function:
            raise ValueError(f"worker target {target!r} must look like 'package.module:function'")
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", "")
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(f"worker target {target!r} must be a module-level function a child process can import")
    return f"{module}:{qualname}"


def _resolve(target: str) -> Callable[..., Any]:
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# The server's own credentials: the worker never needs them (it reports through its queues,
# never to the database or the API), and user code it runs (reward functions, remote-code
# models) must not be able to read them.
SERVER_SECRETS_ENV = ("TUNELAB_DATABASE_URL", "TUNELAB_TOKEN")


def hide_server_secrets() -> None:
    for name in SERVER_SECRETS_ENV:
        os.environ.pop(name, None)


def child_main(target: str, env: dict[str, str], payload: dict[str, Any], events: Any, stops: Any) -> None:
    """Runs first in the child: set the environment, then import and call the worker."""
    hide_server_secrets()
    os.environ.update(env)
    try:
        worker = _resolve(target)
    except Exception as exc:  # an import failure must still reach the parent as an event
        events.put(ev.error(f"the worker {target} could not be loaded: {exc}", traceback.format_exc()))
        events.close()
        events.join_thread()
        os._exit(1)
    worker(payload, events, stops)


@dataclass
class WorkerHandle:
    """One live (or finished) worker process and its two queues."""

    process: Any
    events: Any
    stops: Any
    env: dict[str, str]

    def alive(self) -> bool:
        return self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def release(self) -> None:
        """Stop the stop-queue's feeder thread once the run is over (the event queue's
        reader is closed when the handle is garbage collected)."""
        self.stops.close()


def spawn_worker(mp_context: BaseContext, target: str, payload: dict[str, Any], env: dict[str, str],
                 name: str) -> WorkerHandle:
    """Start a worker; raises whatever `Process.start()` raises."""
    events = mp_context.Queue()
    stops = mp_context.Queue()
    # Not a daemon: daemonic processes may not have children (data loaders do).
    process = mp_context.Process(target=child_main, args=(target, env, payload, events, stops), name=name)
    with main_not_rerun(target):  # the worker needs nothing from the parent's script (bare_main.py)
        process.start()
    # The parent never writes events. Closing its copy of the pipe's write end means a
    # worker killed halfway through writing a message shows up as end-of-file for the
    # reader, instead of a read that waits forever for bytes no one will send.
    events._writer.close()
    # The stop queue's feeder thread must not hold up this process's exit.
    stops.cancel_join_thread()
    return WorkerHandle(process=process, events=events, stops=stops, env=env)


def end_process(process: Any, terminate_wait_s: float = TERMINATE_WAIT_S) -> None:
    """Terminate a worker, then kill it if it has not exited after `terminate_wait_s`."""
    if process.is_alive():
        process.terminate()
        process.join(terminate_wait_s)
    if process.is_alive():
        process.kill()
        process.join(10)
