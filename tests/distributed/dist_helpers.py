"""What the distributed-run tests share: two-rank demo configs, finding the processes
torchrun started (its own, and the ranks) under a worker, and two "machines" on
127.0.0.1 — a head run config and `tunelab train --node-rank 1` for the other node."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import yaml

from tunelab import paths
from tunelab.demos.text import DemoAssets, demo_config
from tunelab.layout import RANK_MODULE

WAIT_S = 240  # a 2-rank run imports torch & co in three processes on two shared cores


def two_rank_config(assets: DemoAssets, **overrides: Any) -> dict[str, Any]:
    """The demo LoRA run on 2 gloo ranks (batch_size 2 each: a global batch of 4, the
    demo's one-process batch)."""
    config = demo_config(assets, **{"batch_size": 2, **overrides}).public()
    config["num_processes"] = 2
    return config


def is_alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def is_rank(process: psutil.Process) -> bool:
    """A rank runs `python -u -m tunelab.worker.launch.rank_entry CONFIG`; torchrun's own command
    line names the module too, after `torch.distributed.run`."""
    try:
        argv = process.cmdline()
    except psutil.Error:
        return False
    return RANK_MODULE in argv and "torch.distributed.run" not in argv


def is_torchrun(process: psutil.Process) -> bool:
    try:
        return "torch.distributed.run" in process.cmdline()
    except psutil.Error:
        return False


def ranks_under(pid: int) -> dict[int, psutil.Process]:
    """The live ranks below a process, by global rank (RANK in their environment)."""
    found = {}
    for process in descendants(pid):
        if is_rank(process) and is_alive(process):
            try:
                found[int(process.environ()["RANK"])] = process
            except (psutil.Error, KeyError, ValueError):
                continue
    return found


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if is_alive(p)]


def wait_until(condition: Callable[[], Any], timeout: float, poll: float = 0.02) -> Any:
    """Poll `condition` until it is truthy; its value, or None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(poll)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def head_config(assets: DemoAssets, port: int, steps: int, join_timeout_s: float = 60, save_steps: int | None = None,
                rdzv_endpoint: bool = False) -> dict[str, Any]:
    """The head's (node rank 0) run config for two nodes on 127.0.0.1, one process each,
    sharing one output folder as two machines share one over NFS."""
    data = demo_config(assets, steps=steps, save_steps=save_steps or steps).public()
    where = ({"rdzv_endpoint": f"127.0.0.1:{port}"} if rdzv_endpoint
             else {"master_addr": "127.0.0.1", "master_port": port})
    data.update(batch_size=2, gradient_accumulation_steps=1, output_dir=str(paths.outputs_root() / "two-nodes"),
                nodes={"count": 2, "node_rank": 0, "join_timeout_s": join_timeout_s, **where})
    return data


def start_second_node(head: dict[str, Any], tmp_path: Path, *extra: str) -> subprocess.Popen:
    """`tunelab train` on "the other machine": the same config file, its own node rank."""
    config = {k: v for k, v in head.items() if k != "nodes"}
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config))
    nodes = head["nodes"]
    where = (["--rdzv-endpoint", nodes["rdzv_endpoint"]] if nodes.get("rdzv_endpoint")
             else ["--master-addr", nodes["master_addr"], "--master-port", str(nodes["master_port"])])
    command = [sys.executable, "-m", "tunelab.cli.main", "train", str(path), "--local", "--nnodes", "2", "--node-rank", "1",
               *where, *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "300"})


def process_tree(root: int) -> set[int]:
    """`root` and every live process descended from it (by parent id)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {root} & set(parents)
    while frontier:
        found |= frontier
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
    return found


def alive_of(pids: set[int]) -> set[int]:
    """The process ids of `pids` still running (not zombies)."""
    running = set()
    for pid in pids:
        try:
            if (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
                running.add(pid)
        except OSError:
            pass
    return running
