"""The worker of a distributed run: start the ranks' engine, relay the reporting rank's events.

The orchestrator spawns this like any worker (same queues, same watchdog, same
finalize), so a run on eight GPUs is one history row with one progress stream and one
stop button. Here, instead of training, the worker:
- starts the ranks through an engine (engine.py) — torchrun (below) or Ray Train (ray/engine.py,
  imported only for a Ray run) — after opening the authenticated event channel
  (channel.py) on an address the ranks can reach; its address and secret reach the
  ranks only through their environment,
- passes each event of the reporting rank on to the parent, and each stop request
  from the parent on to that rank,
- when the engine ends, sends the run's last word: the reporting rank's `complete`, or
  an `error` that names the rank that failed first and why (its own message, or the
  signal that killed it), rather than the broken connection the others saw after it.
An engine runs in its own session so that Ctrl-C in a terminal reaches it only as the
parent's stop. If this process dies, the kernel kills the engine's process
(PR_SET_PDEATHSIG) and the ranks follow it (torchrun's each watch their own parent; Ray
ends a job's workers when its driver is gone).

torchrun's ranks read the config from `<output_dir>/distributed/rank-config.json`
(0600: it carries the run's secrets; removed at the end); torchrun's output goes to
`<output_dir>/distributed/torchrun.log`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from tunelab import events, hardware, layout, paths
from tunelab.worker.context import StopRequested, WorkerContext
from tunelab.worker.launch.engine import Launch, ProcessEngine
from tunelab.worker.launch.rank_entry import ERRORS_ENV
from tunelab.worker.run_config import WorkerConfig

# After the reporting rank's last event, how long the engine gets to end on its own.
FINISH_GRACE_S = 15.0
# After a cancel, how long the ranks get to stop before the engine is ended.
CANCEL_GRACE_S = 10.0
POLL_S = 0.1


class TorchrunEngine(ProcessEngine):
    """torchrun on this node; its ranks read the config from a 0600 file."""

    what = "torchrun"

    def __init__(self, plan: layout.Layout, config: WorkerConfig, folder: Path):
        super().__init__(folder / "torchrun.log")
        self.plan, self.config, self.folder = plan, config, folder
        self.errors_dir = folder / "errors"
        self.config_path = paths.run_rank_config(folder.parent)

    def start(self, launch: Launch) -> None:
        shutil.rmtree(self.errors_dir, ignore_errors=True)
        self.errors_dir.mkdir(parents=True, exist_ok=True)
        payload = self.config.payload()
        _write_private(self.config_path, json.dumps(payload))
        plan = self.plan
        bound = layout.dist_timeout_s(os.environ)  # a bad value fails the run here, before any rank starts
        argv = layout.torchrun_command(plan, payload, str(self.config_path), str(self.folder / "torchrun-logs"))
        env = {**os.environ, **launch.open_channel("127.0.0.1"), ERRORS_ENV: str(self.errors_dir)}
        where = f"{plan.nodes} nodes x {plan.processes_per_node}" if plan.nodes > 1 else f"{plan.processes_per_node}"
        silent = f"; a node silent for {bound} s ({layout.DIST_TIMEOUT_ENV}) fails the run" if plan.nodes > 1 else ""
        launch.ctx.emit(events.status(f"Starting {where} training processes with torchrun ({self.config.distributed}, "
                                      f"world size {plan.world_size}){silent}"))
        self.popen(argv, env)

    def first_failure(self) -> tuple[int, str] | None:
        first = _root_cause(self.own_log())
        return None if first is None else (first[0], _failure_reason(first, self.errors_dir))

    def start_failure(self) -> str | None:
        return _rendezvous_failure(self.own_log(), self.config)

    def cleanup(self) -> None:
        self.kill()
        self.config_path.unlink(missing_ok=True)


def run(config: WorkerConfig, ctx: WorkerContext) -> None:
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ctx.emit(events.make(events.OUTPUT_DIR, output_dir=str(output_dir)))
    plan = config.layout  # planned once, by the entry that chose this launcher
    config = _with_strategy(config, plan, ctx)
    folder = output_dir / "distributed"
    folder.mkdir(parents=True, exist_ok=True)
    if plan.engine == "ray":
        from tunelab.worker.launch.ray.engine import RayEngine  # Ray is an optional extra

        engine: Any = RayEngine(plan, config, folder)
    else:
        engine = TorchrunEngine(plan, config, folder)
    launch = Launch(ctx, engine)
    try:
        ctx.on_stop(launch.on_stop)
        if ctx.stop is not None:
            # Asked before the listener above was there (a cancel right after the start
            # reaches the worker while it is still importing): no rank has started.
            raise StopRequested(save=ctx.stop == "save")
        engine.start(launch)
        if launch.ended_because:  # a stop that came while the engine was starting
            engine.end()
        returncode = _wait(launch)
        launch.reporter_gone.wait(2.0)  # the last events may still be on their way
        ctx.emit(_last_word(launch, returncode))
    finally:
        launch.close()


def _with_strategy(config: WorkerConfig, plan: layout.Layout, ctx: WorkerContext) -> WorkerConfig:
    """Decide DDP or FSDP once, here, and hand every rank the decision (in its config):
    ranks deciding on their own could disagree about free memory."""
    strategy, why = plan.strategy, None
    # Only on one node: another node's `tunelab train` decides alone, from the config,
    # and must arrive at the same answer (multi-node runs name their strategy, or get auto's first rule).
    if plan.engine == "torchrun" and plan.nodes == 1 and layout.visible_gpu_count(os.environ) > 0:
        strategy, why = layout.strategy_for_memory(config.model_dump(), plan.world_size, _weight_bytes(config.model_name),
                                                   _least_free_gpu_bytes())
    if why:
        ctx.emit(events.status(f"distributed=auto: {why}"))
    return config.model_copy(update={"distributed": strategy if strategy != "none" else config.distributed})


def _weight_bytes(model_name: str) -> int | None:
    """The size of a local model folder's weight files (a hub id not downloaded yet: unknown)."""
    folder = Path(model_name).expanduser()
    if not folder.is_dir():
        return None
    files = [f for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern)]
    return sum(f.stat().st_size for f in files) or None


def _least_free_gpu_bytes() -> int | None:
    """The least free memory among this run's GPUs, from `nvidia-smi` (or a short-lived
    torch child where it is missing: hardware.py). Never from torch here: a CUDA context
    in this process, which only waits on torchrun, would hold ~0.5 GiB of every GPU that
    no memory plan counts, and on a GPU in EXCLUSIVE_PROCESS mode no rank could then open
    its own. None (no memory rule) where any GPU's free memory is unknown (a MIG slice)."""
    gpus = hardware.list_gpus()
    free = [g.free_mb for g in gpus if g.free_mb is not None]
    if not gpus or len(free) < len(gpus):
        return None
    return min(free) * 2**20 or None


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _wait(launch: Launch) -> int:
    engine = launch.engine
    while True:
        code = engine.poll()
        if code is not None:
            return code
        now = time.monotonic()
        if launch.final_at is not None and now - launch.final_at > FINISH_GRACE_S:
            engine.kill()  # the run is over; a rank that hangs at exit must not keep it open
        if launch.cancelled_at is not None and now - launch.cancelled_at > CANCEL_GRACE_S:
            engine.kill()
        time.sleep(POLL_S)


def _last_word(launch: Launch, returncode: int) -> dict[str, Any]:
    engine = launch.engine
    final = launch.final
    if final is not None and final.get("type") == events.COMPLETE:
        return final
    if final is None and launch.ended_because:
        return events.complete(None, "stopped before training started; nothing to save yet")
    first = engine.first_failure()
    if final is not None:  # the reporting rank failed; say first whether another rank failed before it
        own = str(final.get("error"))
        if first is not None and first[0] != 0:
            return events.error(f"{first[1]}; rank 0 then stopped: {own}", str(final.get("stack") or ""), bool(final.get("resume_blocked")))
        lost = _node_lost(launch, own)
        return events.error(lost, str(final.get("stack") or ""), bool(final.get("resume_blocked"))) if lost else final
    if first is not None:
        return events.error(first[1], engine.log_tail())
    never_started = engine.start_failure()
    if never_started:
        return events.error(never_started, engine.log_tail())
    return events.error(f"{engine.what} exited with code {returncode} before the run reported a result; "
                        f"see {engine.log_path}", engine.log_tail())


# What gloo and NCCL say in a rank whose peer on another node is gone or silent.
PEER_LOST = re.compile(r"by peer|Timed out waiting|Socket Timeout|Broken pipe|collective operation timeout|"
                       r"NCCL communicator was aborted|remote process exited", re.I)


def _node_lost(launch: Launch, own: str) -> str | None:
    """On a multi-node run, rank 0's failure on a peer that vanished or fell silent: the
    head only sees its side (no other rank of its node failed), so say what it means."""
    config = getattr(launch.engine, "config", None)
    if config is None or config.nodes is None or not PEER_LOST.search(own):
        return None
    bound = layout.dist_timeout_s(os.environ)
    return (f"another node was lost (killed, crashed, cut off, or silent for {bound} s, {layout.DIST_TIMEOUT_ENV}); "
            f"resume from the last checkpoint once every node is back. Rank 0 then failed with: {own}")


RENDEZVOUS_TIMEOUT = re.compile(r"(\d+/\d+ clients joined)|RendezvousTimeoutError|rendezvous.*timed out", re.I)


def _rendezvous_failure(log: str, config: WorkerConfig) -> str | None:
    """A node that never joined: name the rendezvous, the timeout and the fix."""
    nodes = config.nodes
    found = RENDEZVOUS_TIMEOUT.search(log)
    if nodes is None or not found:
        return None
    where = "{}:{}".format(*layout.rendezvous_address(nodes.model_dump()))
    joined = f" ({found.group(1).replace('clients', 'nodes')})" if found.group(1) else ""
    return (f"not every node joined the rendezvous at {where} within {nodes.join_timeout_s:g} s "
            f"(nodes.join_timeout_s){joined}; start `tunelab train` with the same config on each of the "
            f"{nodes.count} machines, each with its own --node-rank, or raise nodes.join_timeout_s")


# One failure in torchrun's report ("[<order noticed>]:" then time, host, rank, exitcode).
FAILURE_ENTRY = re.compile(r"^\[(\d+)\]:\s*\n\s*time\s*:\s*(\S+)\s*\n\s*host\s*:[^\n]*\n\s*rank\s*:\s*(\d+)[^\n]*\n"
                           r"\s*exitcode\s*:\s*(-?\d+)", re.M)


def _root_cause(log: str) -> tuple[int, int] | None:
    """(rank, exit code) of the rank that failed first, from torchrun's failure report.

    torchrun's "Root Cause" is the failure with the earliest time in whole seconds, ties
    going to the one it noticed first; ranks that ended within one poll are noticed in
    local-rank order, so a rank 0 that failed because rank 1 was killed can come first.
    A rank killed by a signal other than SIGTERM (torchrun's own, for the survivors) is
    a cause, never a consequence of another rank's failure: among the earliest, it wins."""
    title = log.rfind(" FAILED\n")  # "<module> FAILED": the report torchrun prints last
    if title < 0:
        return None
    entries = [(when, int(order), int(rank), int(code)) for order, when, rank, code in FAILURE_ENTRY.findall(log[title:])]
    if not entries:
        return None
    earliest = min(when for when, *_ in entries)
    first = min((e for e in entries if e[0] == earliest), key=lambda e: (not _killed_from_outside(e[3]), e[1]))
    return first[2], first[3]


def _killed_from_outside(code: int) -> bool:
    return code < 0 and -code != signal.SIGTERM


def _failure_reason(first: tuple[int, int], errors_dir: Path) -> str:
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
