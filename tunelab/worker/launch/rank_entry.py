"""What every rank of a distributed run runs: `python -m tunelab.worker.launch.rank_entry CONFIG`.

torchrun starts it once per rank (Ray Train calls `run_rank` in each of its workers).
Each rank trains with the same torch backend as a one-process run; the HF Trainer joins
the process group torchrun or Ray set up. One rank reports: it connects to the
launcher's authenticated channel (channel.py), sends the run's events and receives stop
requests, which every rank then agrees on at the next step boundary (ranks.py). The
others send nothing. On a node other than the head, each rank also watches the head's
rendezvous port and ends itself when the head is gone; a rank on the CPU joins its gloo group
with the collective bound (TUNELAB_DIST_TIMEOUT_S), so a lost node fails every collective
that waits on it within that bound. A rank that fails writes its reason to
`$TUNELAB_RANK_ERRORS/rank-<RANK>.txt` for the launcher, prints it, and exits non-zero so
torchrun ends the other ranks at once. The config file holds the run's secrets: it is
written 0600 by the launcher and removed when the run ends.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tunelab import channel
from tunelab.layout import dist_timeout_s
from tunelab.worker.context import WorkerContext
# SIGTERM_REPEAT_WINDOW_S: Slurm's scancel signals every process of the job, so a rank gets the
# supervisor's SIGTERM and, a moment later, the one torchrun passes on. Both are one stop.
from tunelab.worker.entry import (SIGTERM_REPEAT_WINDOW_S, prepare_process, run_in_context,
                                  stop_and_save_on_sigterm)

BACKEND = "tunelab.worker.backends.torch_backend"
HEAD_POLL_S = 1.0
FINISHED_PREFIX = "finished-rank-"
HEAD_MISSES = 2
ERRORS_ENV = "TUNELAB_RANK_ERRORS"


class _Discard:
    """The event sink of a rank that does not report: it keeps only its own failure."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def put(self, event: dict[str, Any]) -> None:
        if event.get("type") == "error":
            self.failure = str(event.get("error"))


def run_rank(payload: dict[str, Any], reporter: bool) -> bool:
    """Train this rank's share of the run; True when it ended without failing.
    `payload`: the launcher's `WorkerConfig.payload()`, validated again in this rank."""
    import torch

    rank = os.environ.get("RANK", "0")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK") or 0))
    else:
        _join_cpu_group()
    client = channel.ChannelClient(os.environ[channel.ADDRESS_ENV], os.environ[channel.SECRET_ENV]) if reporter else None
    sink: Any = client if client is not None else _Discard()
    ctx = WorkerContext(sink)
    if client is not None:
        client.read_stops(lambda message: _apply_stop(ctx, message))
    if threading.current_thread() is threading.main_thread():
        # Ray Train calls this on a thread of its worker, where Python cannot take signals.
        stop_and_save_on_sigterm(ctx, repeat_window_s=SIGTERM_REPEAT_WINDOW_S)
    try:
        ok = run_in_context(payload, ctx, BACKEND)
    finally:
        if client is not None:
            client.close()
    if not ok:
        _record_failure(rank, sink.failure if isinstance(sink, _Discard) else "see the run's error")
    return ok


def _join_cpu_group() -> None:
    """CPU ranks join their gloo process group here, with the collective bound
    (TUNELAB_DIST_TIMEOUT_S): transformers passes its `ddp_timeout` (trainer_setup) to the
    group only on GPUs, so the Trainer's own CPU group would wait 30 minutes on a lost
    node. The Trainer then uses this group. A group already there (Ray's) is kept."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE") or 1) > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=dist_timeout_s(os.environ)))


def _apply_stop(ctx: WorkerContext, message: dict[str, Any]) -> None:
    if message.get("type") == "stop":
        ctx.request_stop(bool(message.get("save")))


def _record_failure(rank: str, reason: str | None) -> None:
    print(f"tunelab rank {rank}: {reason}", file=sys.stderr, flush=True)
    folder = os.environ.get(ERRORS_ENV)
    if folder and reason:
        try:
            (Path(folder) / f"rank-{int(rank)}.txt").write_text(reason)
        except (OSError, ValueError):
            pass  # the printed line still reaches torchrun's log


def watch_head(poll_s: float = HEAD_POLL_S) -> None:
    """On a node other than the head: exit when the head is gone. The head's torchrun
    hosts the rendezvous store at MASTER_ADDR:MASTER_PORT for the whole run; when that
    port stops answering, the head (and with it the run's record and its stop button)
    is gone. A collective with a dead peer can take far longer to fail on its own."""
    address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if os.environ.get("GROUP_RANK", "0") == "0" or not address or not port:
        return

    def loop() -> None:
        misses = 0
        while True:
            time.sleep(poll_s)
            try:
                socket.create_connection((address, int(port)), timeout=poll_s).close()
                misses = 0
            except OSError:
                misses += 1
                if misses >= HEAD_MISSES:
                    print(f"tunelab rank {os.environ.get('RANK')}: the head node's rendezvous at {address}:{port} "
                          "is gone; ending this rank", file=sys.stderr, flush=True)
                    os._exit(1)

    threading.Thread(target=loop, name="tunelab-head-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    prepare_process()
    watch_head()
    config = json.loads(Path(argv[0]).read_text())
    # The head node's torchrun carries the channel; its first local rank reports (global
    # rank 0: tunelab's rendezvous is always static, layout.py). Other nodes' ranks only train.
    reporter = channel.ADDRESS_ENV in os.environ and os.environ.get("LOCAL_RANK", "0") == "0"
    ok = run_rank(config, reporter)
    if ok and os.environ.get("GROUP_RANK", "0") != "0":
        # Beside the config: tells another node's CLI that this rank ended its part of the
        # run (so the head's rendezvous closing afterwards is the run's normal end).
        try:
            (Path(argv[0]).parent / f"{FINISHED_PREFIX}{os.environ.get('RANK', '0')}").touch()
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    # As in the one-process worker: skip the slow interpreter shutdown after training.
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
