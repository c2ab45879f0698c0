"""The worker of a distributed run: start torchrun, relay the reporting rank's events.

The orchestrator spawns this like any worker (same queues, same watchdog, same
finalize), so a run on eight GPUs is one history row with one progress stream and one
stop button. Here, instead of training, the worker:
- writes the config for the ranks (0600: it carries the run's secrets; removed at the end),
- opens the authenticated event channel (channel.py) and starts torchrun with its
  address and secret in the ranks' environment (torchrun's output goes to
  `<output_dir>/distributed/torchrun.log`),
- passes each event of the reporting rank on to the parent, and each stop request
  from the parent on to that rank,
- when torchrun ends, sends the run's last word: the reporting rank's `complete`, or an
  `error` that names the rank that failed first and why (its own message, or the
  signal that killed it), rather than the broken connection the others saw after it.
torchrun runs in its own session so that Ctrl-C in a terminal reaches it only as the
parent's stop. If this process dies, the kernel kills torchrun (PR_SET_PDEATHSIG) and
each rank, watching its own parent, exits within a second.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tunelab import events, layout, paths
from tunelab.channel import ChannelListener
from tunelab.pdeathsig import die_with_parent
from tunelab.worker.context import WorkerContext
from tunelab.worker.rank_entry import ERRORS_ENV

# After the reporting rank's last event, how long torchrun gets to end on its own.
FINISH_GRACE_S = 15.0
# After a cancel, how long the ranks get to stop before torchrun is ended.
CANCEL_GRACE_S = 10.0
POLL_S = 0.1
LOG_TAIL_LINES = 15


class Launch:
    """One torchrun process group and what its reporting rank has said."""

    def __init__(self, ctx: WorkerContext, folder: Path, config: dict[str, Any]):
        self.ctx = ctx
        self.config = config
        self.folder = folder
        self.listener = ChannelListener()
        self.final: dict[str, Any] | None = None  # the reporting rank's complete or error
        self.final_at: float | None = None
        self.reporter_gone = threading.Event()
        self.process: subprocess.Popen | None = None
        self.cancelled_at: float | None = None
        self.ended_because: str | None = None

    def on_message(self, message: dict[str, Any]) -> None:
        if message.get("type") == events.STATUS and message.get("stage"):
            # What a SIGTERM to this process means follows the ranks' stage (entry.py).
            self.ctx.current_stage = str(message["stage"])
        if message.get("type") in (events.COMPLETE, events.ERROR):
            if self.final is None:
                self.final, self.final_at = message, time.monotonic()
            return
        self.ctx.emit(message)

    def on_stop(self, stop: str | None) -> None:
        if stop is None:
            return
        if not self.listener.connected.is_set():
            # No rank is training yet (still importing, or waiting for nodes): nothing to
            # save; end the launch, as a one-process run ends before training.
            self.end("stop before the ranks started training")
            return
        self.listener.send(events.stop_message(stop == "save"))
        if stop == "cancel":
            self.cancelled_at = time.monotonic()

    def end(self, why: str) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            try:
                # torchrun passes SIGTERM on to every rank and waits for them.
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.ended_because = why

    def kill(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run(config: dict[str, Any], ctx: WorkerContext) -> None:
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    ctx.emit(events.make(events.OUTPUT_DIR, output_dir=str(output_dir)))
    plan = layout.plan(config, layout.visible_gpu_count(os.environ))
    config = _with_strategy(config, plan, ctx)
    folder = output_dir / "distributed"
    errors_dir = folder / "errors"
    shutil.rmtree(errors_dir, ignore_errors=True)
    errors_dir.mkdir(parents=True, exist_ok=True)
    config_path = paths.run_rank_config(output_dir)
    _write_private(config_path, json.dumps(config))
    launch = Launch(ctx, folder, config)
    try:
        launch.listener.serve(launch.on_message, launch.reporter_gone.set)
        ctx.on_stop(launch.on_stop)
        argv = layout.torchrun_command(plan, config, str(config_path), str(folder / "torchrun-logs"))
        env = {**os.environ, **launch.listener.environment(), ERRORS_ENV: str(errors_dir)}
        where = f"{plan.nodes} nodes x {plan.processes_per_node}" if plan.nodes > 1 else f"{plan.processes_per_node}"
        ctx.emit(events.status(f"Starting {where} training processes with torchrun ({config['distributed']}, world size {plan.world_size})"))
        with open(folder / "torchrun.log", "ab") as log:
            launch.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                              preexec_fn=die_with_parent)
        returncode = _wait(launch)
        launch.reporter_gone.wait(2.0)  # the last events may still be on their way
        ctx.emit(_last_word(launch, returncode, errors_dir, folder / "torchrun.log"))
    finally:
        launch.listener.close()
        launch.kill()
        config_path.unlink(missing_ok=True)


def _with_strategy(config: dict[str, Any], plan: layout.Layout, ctx: WorkerContext) -> dict[str, Any]:
    """Decide DDP or FSDP once, here, and hand every rank the decision (in its config):
    ranks deciding on their own could disagree about free memory."""
    strategy, why = plan.strategy, None
    # Only on one node: another node's `tunelab train` decides alone, from the config,
    # and must arrive at the same answer (multi-node runs name their strategy, or get auto's first rule).
    if plan.engine == "torchrun" and plan.nodes == 1 and layout.visible_gpu_count(os.environ) > 0:
        strategy, why = layout.strategy_for_memory(config, plan.world_size, _weight_bytes(config["model_name"]),
                                                   _least_free_gpu_bytes())
    if why:
        ctx.emit(events.status(f"distributed=auto: {why}"))
    return {**config, "distributed": strategy if strategy != "none" else config.get("distributed")}


def _weight_bytes(model_name: str) -> int | None:
    """The size of a local model folder's weight files (a hub id not downloaded yet: unknown)."""
    folder = Path(model_name).expanduser()
    if not folder.is_dir():
        return None
    files = [f for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern)]
    return sum(f.stat().st_size for f in files) or None


def _least_free_gpu_bytes() -> int | None:
    try:
        import torch

        return min(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())) or None
    except Exception:  # noqa: BLE001 - no answer means no memory rule, not a failed run
        return None


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _wait(launch: Launch) -> int:
    process = launch.process
    assert process is not None
    while True:
        code = process.poll()
        if code is not None:
            return code
        now = time.monotonic()
        if launch.final_at is not None and now - launch.final_at > FINISH_GRACE_S:
            launch.kill()  # the run is over; a rank that hangs at exit must not keep it open
        if launch.cancelled_at is not None and now - launch.cancelled_at > CANCEL_GRACE_S:
            launch.kill()
        time.sleep(POLL_S)


def _last_word(launch: Launch, returncode: int, errors_dir: Path, log_path: Path) -> dict[str, Any]:
    final = launch.final
    if final is not None and final.get("type") == events.COMPLETE:
        return final
    if final is None and getattr(launch, "ended_because", None):
        return events.complete(None, "stopped before training started; nothing to save yet")
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    first = _first_failure(log)
    reason = _failure_reason(first, errors_dir) or _rendezvous_failure(log, launch.config)
    if final is not None:  # the reporting rank failed; say first whether another rank failed before it
        own = str(final.get("error"))
        if first is not None and first[0] != 0 and reason:
            return events.error(f"{reason}; rank 0 then stopped: {own}", str(final.get("stack") or ""), bool(final.get("resume_blocked")))
        return final
    if reason:
        return events.error(reason, _log_tail(log_path))
    return events.error(f"torchrun exited with code {returncode} before the run reported a result; "
                        f"see {log_path}", _log_tail(log_path))


RENDEZVOUS_TIMEOUT = re.compile(r"(\d+/\d+ clients joined)|RendezvousTimeoutError|rendezvous.*timed out", re.I)


def _rendezvous_failure(log: str, config: dict[str, Any]) -> str | None:
    """A node that never joined: name the rendezvous, the timeout and the fix."""
    nodes = config.get("nodes") or {}
    found = RENDEZVOUS_TIMEOUT.search(log)
    if not nodes or not found:
        return None
    where = nodes.get("rdzv_endpoint") or f"{nodes.get('master_addr')}:{nodes.get('master_port') or 29500}"
    joined = f" ({found.group(1).replace('clients', 'nodes')})" if found.group(1) else ""
    return (f"not every node joined the rendezvous at {where} within {nodes.get('join_timeout_s') or 300:g} s "
            f"(nodes.join_timeout_s){joined}; start `tunelab train` with the same config on each of the "
            f"{nodes.get('count')} machines, each with its own --node-rank, or raise nodes.join_timeout_s")


ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def _first_failure(log: str) -> tuple[int, int] | None:
    """(rank, exit code) of the first failed rank, as torchrun reports it."""
    found = ROOT_CAUSE.search(log)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _failure_reason(first: tuple[int, int] | None, errors_dir: Path) -> str | None:
    if first is None:
        return None
    rank, code = first
    written = errors_dir / f"rank-{rank}.txt"
    if written.exists():
        return f"rank {rank} failed: {written.read_text(errors='replace').strip()}"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"rank {rank} was killed by {name} (signal {-code})"
    return f"rank {rank} exited with code {code}"


def _log_tail(log_path: Path) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return ""
