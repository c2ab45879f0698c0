"""The Ray driver of a run: `python -m tunelab.worker.launch.ray.driver`, started by the launcher
(ray/engine.py, which describes the JSON lines it reads on stdin and writes on stdout).

It connects to the cluster (`ray.init(address=ray_address)`) and runs Ray Train's
TorchTrainer with one worker per rank. Ray Train places the workers, sets RANK,
LOCAL_RANK and WORLD_SIZE and initialises torch.distributed (gloo on CPUs, NCCL on
GPUs); each worker then trains its rank with the same code as a torchrun rank
(`rank_entry.run_rank`), world rank 0 reporting over the launcher's channel. When this
process dies, Ray ends the job's workers.

The run's config, secrets included, reaches the workers only through `train_loop_config`:
Ray keeps it in the cluster's memory (the controller's arguments) and sends it over the
cluster's network, never in a file of ours; with Ray's default settings that network is
neither encrypted nor authenticated, which is why the server refuses `ray_address` unless
started with `--allow-ray`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tunelab.worker.entry import QUIET_ENVIRONMENT

REPORTER_RANK = 0


def train_loop(loop_config: dict[str, Any]) -> None:
    """One Ray Train worker: train this rank; a failed rank raises, so Ray ends the others."""
    import ray.train

    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    # A Ray worker is a process of its own: this is this rank's environment.
    os.environ.update({**loop_config["env"], **loop_config["channel"]})
    from tunelab.worker.launch.rank_entry import ERRORS_ENV, run_rank

    rank = ray.train.get_context().get_world_rank()
    errors = tempfile.mkdtemp(prefix="tunelab-rank-")
    os.environ[ERRORS_ENV] = errors
    if not run_rank(loop_config["config"], reporter=rank == REPORTER_RANK):
        written = Path(errors) / f"rank-{rank}.txt"
        reason = written.read_text(errors="replace").strip() if written.exists() else "it ended without saying why"
        raise RuntimeError(f"rank {rank} failed: {reason}")


def describe_failure(exc: BaseException) -> tuple[int, str]:
    """(rank, why) of the rank that failed first, from Ray Train's error: a worker that
    died outright (killed, out of memory) before one that raised, since a rank that
    raised usually lost a peer; then the lowest rank."""
    failures = getattr(exc, "worker_failures", None) or {}
    if not failures:
        return 0, f"Ray Train failed: {_first_line(exc)}"
    died = {rank: err for rank, err in failures.items() if hasattr(err, "health_check_failure")}
    rank = min(died or failures)
    err = failures[rank]
    if rank in died:
        return rank, f"rank {rank}'s Ray worker died: {_first_line(getattr(err, 'health_check_failure', err))}"
    base = getattr(err, "_base_exc", err)
    text = str(base)
    return rank, text if text.startswith(f"rank {rank} ") else f"rank {rank} failed: {type(base).__name__}: {_first_line(base)}"


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def channel_host(ray: Any) -> str:
    """Loopback when every node of the cluster is this machine; otherwise this node's IP
    as Ray sees it (the address the other nodes reach it on)."""
    mine = ray.util.get_node_ip_address()
    others = {node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")}
    return "127.0.0.1" if others <= {mine} else mine


def main() -> None:
    # stdout carries the launcher's messages only; everything else printed goes to the log.
    said = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def say(message: dict[str, Any]) -> None:
        said.write(json.dumps(message) + "\n")

    request = json.loads(sys.stdin.readline())
    try:
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer
    except ImportError:
        from tunelab.worker.launch.ray.engine import NOT_INSTALLED

        say({"error": NOT_INSTALLED})
        return
    say({"imported": True})
    try:
        ray.init(address=request["address"], log_to_driver=True, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - any way the connect fails is the address's problem to name
        from tunelab.worker.launch.ray.engine import unreachable

        say({"error": unreachable(request["address"], _first_line(exc))})
        return
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    say({"connected": {"channel_host": channel_host(ray), "nodes": nodes}})
    reply = json.loads(sys.stdin.readline() or "{}")
    if "channel" not in reply:
        return  # the launcher went away
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"config": request["config"], "channel": reply["channel"], "env": request["env"]},
        scaling_config=ScalingConfig(num_workers=int(request["workers"]), use_gpu=bool(request["use_gpu"])),
        run_config=RunConfig(storage_path=request["storage_path"], name="train"),
    )
    try:
        trainer.fit()
    except Exception as exc:  # noqa: BLE001 - every failure is the launcher's to word
        rank, reason = describe_failure(exc)
        say({"failure": {"rank": rank, "reason": reason}})
        return
    say({"finished": True})


if __name__ == "__main__":
    try:
        main()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Leaving the job is Ray's to clean up once this process is gone; skip the slow shutdown.
        os._exit(0)
