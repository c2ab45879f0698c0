"""What the distributed-run tests share: two-rank demo configs and finding the
processes torchrun started (its own, and the ranks) under a worker."""

from __future__ import annotations

import time
from typing import Any, Callable

import psutil

from tunelab.demo import DemoAssets, demo_config
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
    """A rank runs `python -u -m tunelab.worker.rank_entry CONFIG`; torchrun's own command
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
