"""`tunelab sweep FILE` and `tunelab sweep show ID|NAME`: run a sweep in this process, or
print a sweep's trials, its best run and the parameters' importances.

A sweep runs in the CLI process itself: its trials are this process's runs (workers it
spawns, like `tunelab train`), nothing else is started. Ctrl-C, SIGTERM or SIGHUP stop
the running trials and save them; they are not counted, and running the same file again
resumes the sweep from the trials it had. Exit codes: 0 a best run was found, 1 no trial
completed, 2 bad input, 130 stopped.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from tunelab.text import printable

# For tests and benchmarks only, as for the server (tunelab/server/app.py): trials run a
# scripted worker ("module:function") instead of the trainer.
WORKER_TARGET_ENV = "TUNELAB_WORKER_TARGET"


def run_sweep(path: Path, console: Any, err_console: Any) -> int:
    """Check the sweep file, then run it to its budget; returns the exit code."""
    from tunelab.config.run_config import ConfigError
    from tunelab.sweeps.spec import check_corners, load_sweep

    try:
        spec = load_sweep(path)
        check_corners(spec, _check_machine)
    except ConfigError as exc:
        for err in exc.errors:
            err_console.print(f"[red]sweep error[/] [bold]{_markup(err.field)}[/]: {_markup(err.message)}")
        return EXIT_BAD_CONFIG
    from tunelab.store import Store
    from tunelab.sweeps.runner import SweepRunner

    store = Store()
    _close_orphans(store)
    orchestrator = _orchestrator(store)
    runner = SweepRunner(store, orchestrator, spec, lambda line: console.print(_markup(line)))
    console.print(f"sweep {runner.sweep_id} ({_markup(spec.name)}): {spec.trials} trials, {spec.objective.direction} "
                  f"{_markup(spec.objective.metric)}, {spec.sampler} sampler, {spec.pruner} pruner")
    stopped = threading.Event()

    def on_signal(_signum, _frame) -> None:
        stopped.set()
        console.print("[yellow]stopping the sweep: running trials stop and save; run the same file again to resume[/]")
        runner.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        sweep = runner.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        orchestrator.shutdown()
    print_sweep(store, sweep["id"], console)
    if stopped.is_set():
        return EXIT_STOPPED
    return EXIT_OK if sweep["best_run_id"] is not None else EXIT_ERROR


def show_sweep(key: str, console: Any, err_console: Any) -> int:
    from tunelab.store import Store
    from tunelab.store.sweeps import get_sweep

    store = Store()
    sweep = get_sweep(store, int(key)) if key.isdigit() else get_sweep(store, key)
    if sweep is None:
        err_console.print(f"[red]error:[/] no sweep {_markup(key)}; `tunelab sweep show` takes a sweep's id or name")
        return EXIT_BAD_CONFIG
    print_sweep(store, sweep["id"], console)
    return EXIT_OK


def print_sweep(store: Any, sweep_id: int, console: Any) -> None:
    """The trials as a table, the best run and the parameters' importances."""
    from rich.table import Table

    from tunelab.store.sweeps import get_sweep, list_trials
    from tunelab.sweeps import study as studies

    sweep = get_sweep(store, sweep_id)
    metric = sweep["spec"]["objective"]["metric"]
    trials = list_trials(store, sweep_id)
    fields = list(sweep["spec"]["space"])
    table = Table(title=f"sweep {sweep_id}: {printable(sweep['name'])}")
    for column in ("trial", "run", "state", metric, *fields):
        table.add_column(printable(column))
    for t in trials:
        table.add_row(str(t["trial"]), str(t["run_id"] or "-"), t["state"], _number(t["value"]),
                      *(_number(t["params"].get(f)) for f in fields))
    console.print(table)
    if sweep["best_run_id"] is not None:
        console.print(f"best: run {sweep['best_run_id']} ({_markup(metric)} {sweep['best_value']:.4g})")
    else:
        console.print("best: none yet (no trial has completed)")
    weights = studies.sweep_importances(store, sweep_id)
    if weights:
        console.print("importance: " + ", ".join(f"{_markup(k)} {v:.2f}" for k, v in weights.items()))


def _check_machine(cfg: Any) -> None:
    """What a start checks of this machine (GPUs asked for, 4-bit without CUDA), up front."""
    from tunelab import hardware
    from tunelab.config.run_config import check_machine

    gpus = hardware.list_gpus()
    check_machine(cfg, len(gpus), hardware.mig_slices(gpus))


def _orchestrator(store: Any):
    from tunelab.orchestrator import Orchestrator

    target = os.environ.get(WORKER_TARGET_ENV, "").strip()
    # As `tunelab train`: this process trains its trials now or waits to, never the home's queue.
    return Orchestrator(store, queueing=False, **({"worker_target": target} if target else {}))


def _close_orphans(store: Any) -> None:
    """Rows left `running` by a dead process (a sweep killed mid-trial) end before new trials."""
    from tunelab import paths
    from tunelab.checkpoints import latest_valid_checkpoint
    from tunelab.orchestrator.ownership import owner_is_alive

    locks = paths.locks_dir(store.path)
    store.close_orphans(latest_valid_checkpoint, lambda lock: owner_is_alive(locks, lock), host=socket.gethostname())


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else printable(value)


def _markup(text: Any) -> str:
    from rich.markup import escape

    return escape(printable(text))
