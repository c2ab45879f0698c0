"""A node lost mid-run, and where global rank 0 lands, with two "machines" on 127.0.0.1
(gloo, one CPU process each): the head runs through the Orchestrator and records the
run; the other node is `tunelab train --node-rank 1`.

A node killed outright closes its sockets, so the head's rank fails on its next
collective at once; a frozen node (a machine that hangs or drops off the network)
closes nothing, and the head's rank would wait in its collective until the process
group's timeout — transformers' default 30 minutes, tunelab's TUNELAB_DIST_TIMEOUT_S.
Both must end the run `error` within that bound, resumable, with no process of the
head's left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest
from dist_helpers import (alive, descendants, free_port, head_config, is_rank, is_torchrun, process_tree,
                          ranks_under, start_second_node, wait_until)

from tunelab import layout, paths
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.config.run_config import parse_config
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.resume import check_resumable
from tunelab.store import Store

pytestmark = pytest.mark.slow

RUN_WAIT_S = 300
BOUND_S = 30  # TUNELAB_DIST_TIMEOUT_S in these tests
# After the bound: the head's rank writes its reason and exits, torchrun and the launcher
# end, the orchestrator finalizes. Far below the 1800 s the run would wait without it.
AFTER_BOUND_S = 90


def _training_with_a_checkpoint(events: list, run_id: int, output_dir: str) -> bool:
    trained = any(e["type"] == "progress" and e.get("run_id") == run_id and e["step"] >= 3 for e in events)
    return trained and latest_valid_checkpoint(output_dir) is not None


def _heads_training_processes(node_pid: int) -> list:
    """The head's torchrun and rank: the test's descendants outside the other node's tree."""
    return [p for p in descendants(os.getpid()) if p.pid not in process_tree(node_pid) and (is_torchrun(p) or is_rank(p))]


def _lose_the_node_mid_run(demo_assets, tmp_path, monkeypatch, how: signal.Signals) -> None:
    monkeypatch.setenv(layout.DIST_TIMEOUT_ENV, str(BOUND_S))
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    events: list = []
    orchestrator.subscribe(events.append)
    node = None
    node_tree: set[int] = set()
    try:
        head = head_config(demo_assets, free_port(), steps=400, save_steps=2)
        run_id = orchestrator.start(parse_config(head))
        node = start_second_node(head, tmp_path)
        assert wait_until(lambda: _training_with_a_checkpoint(events, run_id, head["output_dir"]), RUN_WAIT_S, poll=0.2), \
            "the two nodes never trained past a checkpoint"
        head_processes = _heads_training_processes(node.pid)
        assert len(head_processes) == 2, head_processes  # torchrun and its rank
        # The whole machine at once: its `tunelab train`, torchrun and rank.
        node_tree = process_tree(node.pid)
        for pid in node_tree:
            os.kill(pid, how)
        lost_at = time.monotonic()
        assert orchestrator.wait_idle(BOUND_S + AFTER_BOUND_S), \
            f"the run was still going {BOUND_S + AFTER_BOUND_S} s after the node was lost ({how.name})"
        row = store.get_run(run_id)
        assert row["status"] == "error", row
        assert row["error_message"].startswith("another node was lost") and "Rank 0 then failed with" in row["error_message"], row["error_message"]
        checkpoint = check_resumable(store, run_id)[1]
        assert checkpoint.parent == paths.outputs_root() / "two-nodes"
        assert wait_until(lambda: not alive(head_processes), 10), f"left running: {alive(head_processes)}"
        statuses = [e["message"] for e in events if e["type"] == "status" and e.get("run_id") == run_id]
        assert any(f"a node silent for {BOUND_S} s" in s for s in statuses), statuses
        print(f"{how.name}: recorded {row['status']} {time.monotonic() - lost_at:.1f} s after; {row['error_message']}")
    finally:
        for pid in node_tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if node is not None and node.poll() is None:
            node.kill()
        orchestrator.shutdown()


def test_a_worker_node_killed_mid_run_ends_the_run_error_resumable(demo_assets, home, tmp_path, monkeypatch):
    _lose_the_node_mid_run(demo_assets, tmp_path, monkeypatch, signal.SIGKILL)


def test_a_frozen_worker_node_ends_the_run_error_within_the_collective_timeout(demo_assets, home, tmp_path, monkeypatch):
    """SIGSTOP: every process of the node is there, its sockets open, and nothing answers."""
    _lose_the_node_mid_run(demo_assets, tmp_path, monkeypatch, signal.SIGSTOP)


def test_global_rank_0_is_on_the_head_even_when_the_other_node_joins_first(demo_assets, home, tmp_path):
    """With `--rdzv-endpoint`: torchrun's c10d rendezvous would number the nodes by host
    name and then process id, so the node whose torchrun started first (here the other
    one: same host, lower pid) would get global rank 0 and save the checkpoints."""
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    node = None
    try:
        head = head_config(demo_assets, free_port(), steps=3, rdzv_endpoint=True)
        node = start_second_node(head, tmp_path)
        assert wait_until(lambda: any(is_torchrun(p) for p in descendants(node.pid)), RUN_WAIT_S, poll=0.2)
        run_id = orchestrator.start(parse_config(head))
        placed = wait_until(lambda: len(ranks_under(os.getpid())) == 2 and ranks_under(os.getpid()), RUN_WAIT_S, poll=0.2)
        assert placed, "the ranks never started"
        node_tree = process_tree(node.pid)
        on_node = {rank for rank, process in placed.items() if process.pid in node_tree}
        assert on_node == {1}, placed
        assert orchestrator.wait_idle(RUN_WAIT_S)
        row = store.get_run(run_id)
        assert row["status"] == "completed", row["error_message"]
        output, _ = node.communicate(timeout=60)
        assert node.returncode == 0, output[-3000:]
        assert "joining the head at 127.0.0.1:" in output
    finally:
        if node is not None:
            for pid in process_tree(node.pid):  # a failed check leaves its torchrun and rank running
                os.kill(pid, signal.SIGKILL)
        orchestrator.shutdown()


def test_a_bad_collective_timeout_is_refused_on_every_node_before_torchrun_starts(demo_assets, home, tmp_path, monkeypatch):
    monkeypatch.setenv(layout.DIST_TIMEOUT_ENV, "5m")
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    try:
        head = head_config(demo_assets, free_port(), steps=2)
        run_id = orchestrator.start(parse_config(head))
        node = start_second_node(head, tmp_path)
        output, _ = node.communicate(timeout=RUN_WAIT_S)
        assert orchestrator.wait_idle(RUN_WAIT_S)
        row = store.get_run(run_id)
        assert row["status"] == "error" and f"{layout.DIST_TIMEOUT_ENV}='5m'" in row["error_message"], row
        assert node.returncode == 2 and f"{layout.DIST_TIMEOUT_ENV}='5m'" in output, output[-2000:]
        assert "torchrun's output" not in output  # refused before starting it
    finally:
        orchestrator.shutdown()
