"""The spawn target of every run: `run_worker(config, events, stops)`.

It sets up what every backend shares — quiet libraries, the stop-queue reader, a
watchdog that ends the process when its parent dies — then validates the payload into
the typed `WorkerConfig` (once: everything below reads its attributes) and runs the
backend it names (`torch_backend`, or `mlx`, imported only when chosen). A backend
exception becomes an `error{error, stack}` event with secrets scrubbed out (out of GPU
memory and an unwritable output folder are worded as the settings to change). After the
last event the queue is flushed and the process leaves through `os._exit(0)`: a normal
interpreter shutdown after training takes 1.3-1.7 s, the flush-and-exit about 0.1 s.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from tunelab import events as ev
from tunelab.remote_code import check as remote_code_check
from tunelab.worker.data import tokenizer_threads
from tunelab.worker.context import RunSettingError, StopRequested, WorkerContext
from tunelab.worker.out_of_memory import explain_out_of_memory
from tunelab.worker.output_checks import explain_output_failure
from tunelab.worker.run_config import WorkerConfig, payload_secrets, worker_config

PARENT_POLL_SECONDS = 1.0
# A supervisor that signals every process of a job (Slurm's scancel and time limit,
# systemd's control-group kill) reaches a worker twice over: by its own SIGTERM and by
# the stop-and-save its signalled parent asks for (a rank: by torchrun passing its own
# SIGTERM on). Whichever comes first, a SIGTERM this soon after it is the same stop.
SIGTERM_REPEAT_WINDOW_S = 10.0
BACKENDS = {"torch": "tunelab.worker.backends.torch_backend", "mlx": "tunelab.worker.backends.mlx.train"}
LAUNCHER = "tunelab.worker.launch.launcher"
# Library chatter the parent cannot use; set before the libraries are imported.
QUIET_ENVIRONMENT = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    # Other libraries' own bars (sentence-transformers' model card) would draw over the
    # parent's progress bar; progress reaches the user as events.
    "TQDM_DISABLE": "1",
}


def run_worker(config: dict[str, Any], events: Any, stops: Any) -> None:
    """Run one training job in this (spawned) process and exit when it is over.
    `config`: the parent's payload, validated in `run_in_context`."""
    prepare_process()
    ctx = WorkerContext(events)
    ctx.read_stops(stops)
    stop_and_save_on_sigterm(ctx, repeat_window_s=SIGTERM_REPEAT_WINDOW_S)
    try:
        run_in_context(config, ctx)
    finally:
        _flush_and_exit(events)


def prepare_process() -> None:
    """What every training process does first: ignore Ctrl-C, quiet the libraries, and
    end itself when its parent dies."""
    # Ctrl-C in a terminal reaches the whole process group; the parent turns it into a
    # stop-and-save, so the worker must not die of it on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tokenizer_threads.remember_user_choice()
    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    # bitsandbytes warns on every CPU import about an optional kernel hub package it
    # cannot fetch offline; the warning changes nothing about training.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    _thread_lock_for_tqdm()
    watch_parent()


def _backend_module(config: WorkerConfig) -> str:
    """The module that trains this run: a backend in this process, or the launcher that
    starts several ranks (through torchrun or Ray) and relays their events."""
    name = config.resolved_backend
    if name == "torch" and config.layout.engine != "single":
        return LAUNCHER
    return BACKENDS[name]


def run_in_context(payload: dict[str, Any] | WorkerConfig, ctx: WorkerContext, module: str | None = None) -> bool:
    """Validate the payload into the typed config, then run `module.run(config, ctx)` (by
    default the module the config chooses); every way it ends becomes exactly one final
    event. Returns False when it failed."""
    config: WorkerConfig | None = None
    try:
        config = worker_config(payload)
        check_remote_code(config, ctx)
        backend = importlib.import_module(module or _backend_module(config))
        backend.run(config, ctx)
        if not ctx.finished:
            ctx.emit(ev.error("the training backend ended without reporting a result"))
    except StopRequested as stop:
        note = "; nothing to save yet" if stop.save else ""
        ctx.complete(None, f"stopped before training started{note}")
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent as an event
        if not ctx.finished:  # after `complete` the parent has its answer; a late failure changes nothing
            report_failure(ctx, config, exc, payload_secrets(payload))
        return False
    return True


def check_remote_code(config: WorkerConfig, ctx: WorkerContext) -> None:
    """With trust_remote_code, the model's code must be the approved code (if a fingerprint
    is set) before anything can import it; a model with no code of its own gets a note."""
    try:
        code = remote_code_check.check_approved(config.model_dump())
    except remote_code_check.RemoteCodeRefused as exc:
        raise RunSettingError(exc.field, str(exc)) from None
    if code is not None and code.fingerprint is None:
        ctx.emit(ev.status(remote_code_check.no_code_note(code)))


def stop_and_save_on_sigterm(ctx: WorkerContext, repeat_window_s: float = 0.0) -> None:
    """Supervisors often signal every process of a job at once (systemd's default
    control-group kill, Slurm's preemption): a worker in the middle of training takes its
    first SIGTERM as a stop-and-save, as the parent (signalled too) would ask, so the work
    since the last checkpoint is kept. Before training, once a stop is under way, or on a
    second signal, SIGTERM ends the worker as usual — the parent's own `end_process`
    relies on that (and follows a SIGTERM ignored here with SIGKILL).
    `repeat_window_s`: a SIGTERM that comes within that many seconds of a stop-and-save
    being asked (by the parent's stop queue, the launcher's channel or an earlier SIGTERM)
    is the same stop delivered twice — by the supervisor and by the parent or torchrun —
    and is ignored."""

    def on_sigterm(signum: int, _frame: Any) -> None:
        if ctx.current_stage == "training" and ctx.stop is None and not ctx.finished:
            ctx.request_stop(save=True)
            print("tunelab worker: SIGTERM during training; stopping at the next step and saving "
                  "(a second SIGTERM ends it at once)", file=sys.stderr, flush=True)
            return
        asked = ctx.stop_requested_at
        if (ctx.stop == "save" and not ctx.finished and asked is not None
                and time.monotonic() - asked < repeat_window_s):
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)


def report_failure(ctx: WorkerContext, config: WorkerConfig | None, exc: BaseException,
                   secrets: list[str] | None = None) -> None:
    """Send the run's `error` event. This is the last word the parent gets, so it must
    not fail itself: if explaining the failure fails, the plain failure is sent; if even
    sending fails, the process exits non-zero with the reason on stderr. `config` is None
    where the payload did not validate; `secrets` are then the payload's own."""
    message, stack = describe_failure(config, exc, secrets)
    try:
        ctx.emit(ev.error(message, stack))
    except BaseException:  # noqa: BLE001 - the queue is broken: say so where the parent's log sees it
        print(f"tunelab worker: the error event could not be sent: {message}", file=sys.stderr, flush=True)
        os._exit(1)


def describe_failure(config: WorkerConfig | None, exc: BaseException,
                     secrets: list[str] | None = None) -> tuple[str, str]:
    """(message, stack) of a failure being handled, worded as the settings to change
    where it is a known one, with the run's secrets scrubbed out."""
    secrets = (config.secret_values() if config is not None else []) + (secrets or [])
    stack = traceback.format_exc()
    try:
        known = None if config is None else (explain_out_of_memory(config, exc)
                                             or explain_output_failure(config.output_dir, exc))
        message = known or _describe(exc)
    except BaseException as explaining:  # noqa: BLE001 - fall back to the failure as it is
        message = f"{_describe(exc)} (looking into the output folder failed too: {_describe(explaining)})"
    return _scrub(message, secrets), _scrub(stack, secrets)


def _thread_lock_for_tqdm() -> None:
    # tqdm's default lock is a multiprocessing semaphore registered with the parent's
    # resource tracker; after `os._exit` it would be reported as leaked in the parent.
    # This process has one writer of progress bars, so a thread lock serves.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())



def watch_parent(poll_seconds: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """End this process when its parent dies, so no orphan keeps training (and holding a GPU)."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(poll_seconds)
            # An orphan is re-parented (to init or a subreaper), so its parent id changes.
            if os.getppid() != parent:
                os._exit(1)

    thread = threading.Thread(target=loop, name="tunelab-parent-watchdog", daemon=True)
    thread.start()
    return thread


def _describe(exc: BaseException) -> str:
    # Setting errors already read "field: what to change"; a class name would only add noise.
    if isinstance(exc, RunSettingError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__



def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _flush_and_exit(events: Any) -> None:
    try:
        events.close()
        events.join_thread()
    finally:
        os._exit(0)
