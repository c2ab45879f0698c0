"""A node other than the head in a multi-node run: `tunelab train CONFIG --node-rank N`.

The head (node rank 0) records the run, streams its progress and takes stop requests;
every other node only trains. Here that means: no run database, no orchestrator, no
event channel — torchrun with the same config and rendezvous flags as the head, in the
foreground, until the run ends. Its ranks stop when the head's ranks agree to stop
(every stop is agreed by all ranks at a step boundary).

Ctrl-C here does not stop the run: that is the head's to decide. A second Ctrl-C, or a
SIGTERM (a supervisor ending the job), sends torchrun SIGTERM, which its ranks take as a
stop-and-save that every rank then agrees on — the whole run stops and saves at the next
step, and the head records it `stopped`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from tunelab import layout, paths
from tunelab.config.run_config import RunConfig
from tunelab.pdeathsig import die_with_parent
from tunelab.worker.launch.rank_entry import FINISHED_PREFIX, HEAD_MISSES, HEAD_POLL_S

# After this node's ranks all finished, how long torchrun gets to end by itself.
FINISHED_GRACE_S = 30.0


def run_worker_node(cfg: RunConfig, say: Callable[[str], None]) -> int:
    """Train this node's share of a multi-node run; returns torchrun's exit code."""
    nodes = cfg.nodes
    assert nodes is not None and nodes.node_rank > 0
    label = f"node-{nodes.node_rank}-{Path(cfg.model_name).name or 'run'}"
    output_dir = paths.resolve_output_dir(cfg.output_dir, label, cfg.allow_output_outside_root)
    payload = {**cfg.worker_payload(), "output_dir": str(output_dir)}
    plan = layout.plan(payload, layout.visible_gpu_count(os.environ))
    bound = layout.dist_timeout_s(os.environ)  # a bad value: refused before torchrun starts
    with tempfile.TemporaryDirectory(prefix="tunelab-node-") as private:  # 0700: the config holds secrets
        config_path = Path(private) / "rank-config.json"
        config_path.write_text(json.dumps(payload))
        config_path.chmod(0o600)
        argv = layout.torchrun_command(plan, payload, str(config_path), str(Path(private) / "logs"))
        say(f"node {nodes.node_rank} of {nodes.count}: {_processes(plan.processes_per_node)}, "
            f"joining {_rendezvous(cfg)}; the head node (node rank 0) records the run and takes stop requests; "
            f"a node silent for {bound} s ({layout.DIST_TIMEOUT_ENV}) fails the run")
        log_path = output_dir / "distributed" / f"node-{nodes.node_rank}-torchrun.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        say(f"torchrun's output: {log_path}")
        # torchrun's own chatter (tracebacks at a normal end included) stays in the log;
        # this terminal gets the outcome and, on failure, the log's last lines.
        with open(log_path, "ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=die_with_parent)
        interrupts = 0

        def on_interrupt(_signum: int, _frame: object) -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                say("the head node stops this run (Ctrl-C there, `tunelab runs`, or the page); "
                    "press Ctrl-C again to stop and save the whole run from here")
                return
            say("stopping the whole run at the next step and saving")
            os.killpg(process.pid, signal.SIGTERM)

        def on_terminate(_signum: int, _frame: object) -> None:
            # A supervisor ending the job (Slurm's scancel, its time limit) signals every
            # process at once; this node passes it on once, as a stop-and-save that all
            # ranks agree on (each takes the copy it got directly and this one as one stop).
            nonlocal interrupts
            if interrupts < 2:
                interrupts = 2
                say("SIGTERM: stopping the whole run at the next step and saving")
                os.killpg(process.pid, signal.SIGTERM)

        _end_when_head_is_gone(process, cfg, say, Path(private), plan.processes_per_node)
        previous_term = signal.signal(signal.SIGTERM, on_terminate)
        previous = signal.signal(signal.SIGINT, on_interrupt)
        try:
            code = process.wait()
            if code != 0:
                say(f"torchrun ended with code {code}; the last lines of {log_path}:\n{_tail(log_path)}")
            return code
        finally:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)


def _end_when_head_is_gone(process: subprocess.Popen, cfg: RunConfig, say: Callable[[str], None],
                           private: Path, local_ranks: int) -> None:
    """torchrun on this node, once its ranks failed with the head gone, can spend a long
    while trying to reach the head's rendezvous store. When the head's rendezvous port
    stops answering after it had answered, the run is over here too: end torchrun — at
    once if this node's ranks had not finished (the head died), or after a grace if they
    all had (the head simply closed the rendezvous at the run's normal end first)."""
    nodes = cfg.nodes
    assert nodes is not None
    host, port = layout.rendezvous_address(nodes.model_dump())

    def answers() -> bool:
        try:
            socket.create_connection((str(host), int(port)), timeout=HEAD_POLL_S).close()
            return True
        except OSError:
            return False

    def loop() -> None:
        seen, misses = False, 0
        while process.poll() is None:
            time.sleep(HEAD_POLL_S)
            if answers():
                seen, misses = True, 0
                continue
            misses += 1
            if not seen or misses < HEAD_MISSES:
                continue
            if len(list(private.glob(f"{FINISHED_PREFIX}*"))) >= local_ranks:
                try:
                    process.wait(FINISHED_GRACE_S)
                    return
                except subprocess.TimeoutExpired:
                    pass
            else:
                say(f"the head's rendezvous at {host}:{port} is gone; ending this node's training processes")
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            return

    threading.Thread(target=loop, name="tunelab-head-watch", daemon=True).start()


def _processes(count: int) -> str:
    return f"{count} training process{'es' if count != 1 else ''}"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _rendezvous(cfg: RunConfig) -> str:
    nodes = cfg.nodes
    assert nodes is not None
    return "the head at {}:{}".format(*layout.rendezvous_address(nodes.model_dump()))

