"""Two machines without a cluster manager, stood in for by two torchrun agents on
127.0.0.1: the head (node rank 0) runs through the Orchestrator and records the run; the
other node is `tunelab train CONFIG --nnodes 2 --node-rank 1 ...` and only trains. Both
share one output folder, as two real machines share one over NFS."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_helpers import alive_of, free_port, head_config, process_tree, start_second_node

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.config.run_config import parse_config
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

pytestmark = pytest.mark.slow

RUN_WAIT_S = 240


def _progress(events: list, run_id: int, at_least: int) -> bool:
    return any(e["type"] == "progress" and e.get("run_id") == run_id and e["step"] >= at_least for e in events)


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_two_nodes_train_stop_and_save_then_resume(demo_assets, home, tmp_path):
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    events: list = []
    orchestrator.subscribe(events.append)
    try:
        head = head_config(demo_assets, free_port(), steps=40)
        first = orchestrator.start(parse_config(head))
        node = start_second_node(head, tmp_path)
        _wait(lambda: _progress(events, first, 2), RUN_WAIT_S)
        orchestrator.stop(save=True, expected_run_id=first)
        assert orchestrator.wait_idle(RUN_WAIT_S)
        row = store.get_run(first)
        assert row["status"] == "stopped", row["error_message"]
        step = row["final_step"]
        checkpoint = Path(row["output_dir"]) / f"checkpoint-{step}"
        assert validate_checkpoint(checkpoint).step == step
        # Each node's rank saved its own random state into the shared checkpoint.
        assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
        output, _ = node.communicate(timeout=60)
        assert node.returncode == 0, output[-3000:]
        assert "node 1 of 2" in output and "head node" in output
        stored = [m["step"] for m in store.get_metrics(first)]
        assert stored == list(range(1, step + 1))
        statuses = [e["message"] for e in events if e["type"] == "status" and e.get("run_id") == first]
        assert any("2 nodes x 1" in s and "world size 2" in s for s in statuses)

        # Resume: the head continues the recorded run; the other node is told the checkpoint.
        second = orchestrator.resume(first)
        node = start_second_node({**head, "max_steps": 40}, tmp_path, "--set", f"resume_from={checkpoint}")
        assert orchestrator.wait_idle(RUN_WAIT_S)
        resumed = store.get_run(second)
        assert resumed["status"] == "completed", resumed["error_message"]
        steps = [m["step"] for m in store.get_metrics(second)]
        assert steps == list(range(step + 1, 41))
        output, _ = node.communicate(timeout=60)
        assert node.returncode == 0, output[-3000:]
    finally:
        orchestrator.shutdown()


def test_a_node_that_never_joins_fails_the_run_naming_the_rendezvous(demo_assets, home):
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    try:
        port = free_port()
        run_id = orchestrator.start(parse_config(head_config(demo_assets, port, steps=4, join_timeout_s=3)))
        assert orchestrator.wait_idle(RUN_WAIT_S)
        row = store.get_run(run_id)
        assert row["status"] == "error"
        message = row["error_message"]
        assert f"127.0.0.1:{port}" in message and "3 s" in message and "nodes.join_timeout_s" in message
        assert "1/2 nodes joined" in message and "--node-rank" in message
    finally:
        orchestrator.shutdown()


HEAD_SCRIPT = """
import json, sys
from tunelab import paths
from tunelab.config.run_config import parse_config
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

def main():
    orchestrator = Orchestrator(Store(paths.db_path()))
    def say(event):
        if event["type"] == "progress":
            print("STEP", event["step"], flush=True)
    orchestrator.subscribe(say)
    orchestrator.start(parse_config(json.loads(sys.argv[1])))
    orchestrator.wait_idle(600)

if __name__ == "__main__":
    main()
"""


def test_killing_the_head_ends_every_rank_on_every_node(demo_assets, home, tmp_path):
    """The head's process (the server, or `tunelab train`) is killed outright mid-run: its
    torchrun dies with it, its ranks follow, and the other node's ranks, cut off from
    the collective, fail and exit too — every training process within 5 s."""
    import json

    head = head_config(demo_assets, free_port(), steps=400)
    script = tmp_path / "head.py"
    script.write_text(HEAD_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), json.dumps(head)], stdout=subprocess.PIPE, text=True)
    node = start_second_node(head, tmp_path)
    try:
        deadline = time.monotonic() + RUN_WAIT_S
        while not (parent.stdout.readline() or "").startswith("STEP"):
            assert time.monotonic() < deadline and parent.poll() is None, "the head never trained"
        # Both nodes' trees: the head's launcher, torchrun and rank; the other node's torchrun and rank.
        head_tree, node_tree = process_tree(parent.pid) - {parent.pid}, process_tree(node.pid) - {node.pid}
        assert len(head_tree) >= 3 and len(node_tree) >= 2, (head_tree, node_tree)
        parent.kill()
        killed = time.monotonic()
        while alive_of(head_tree | node_tree):
            assert time.monotonic() - killed < 5, f"still running 5 s after the kill: {alive_of(head_tree | node_tree)}"
            time.sleep(0.1)
        node.wait(timeout=30)
        assert node.returncode != 0
        assert "torchrun ended with code" in node.stdout.read()
    finally:
        for process in (parent, node):
            if process.poll() is None:
                process.kill()


def test_auto_shards_an_adapter_run_whose_base_does_not_fit_one_gpu():
    from tunelab.layout import strategy_for_memory

    lora = {"training_type": "lora", "distributed": "auto"}
    assert strategy_for_memory(lora, 4, 10 * 2**30, 40 * 2**30) == ("ddp", None)
    strategy, why = strategy_for_memory(lora, 4, 30 * 2**30, 24 * 2**30)
    assert strategy == "fsdp" and "30.0 GiB" in why and "24.0 GiB" in why
    assert strategy_for_memory({**lora, "load_in_4bit": True}, 4, 30 * 2**30, 24 * 2**30)[0] == "ddp"
    assert strategy_for_memory({**lora, "distributed": "ddp"}, 4, 30 * 2**30, 24 * 2**30)[0] == "ddp"
    assert strategy_for_memory({"training_type": "full"}, 2, None, None)[0] == "fsdp"
    assert strategy_for_memory(lora, 1, 30 * 2**30, 24 * 2**30)[0] == "none"
