"""`tunelab runs` with owners and queue places, and `tunelab queue` on the home's run
database (no server running): list, move, priority and cancel, with the refusals a user
meets — a run that is not queued, a place outside its priority, a cancel that lost the
race to a server's claim. Real SQLite in a temporary home; the CLI in this process."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tunelab.cli.main import app
from tunelab.cli.queue import device_text
from tunelab.store import Store

runner = CliRunner()


def cli(*args: str, columns: int = 120):
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.fixture
def lab(home):
    """A finished run of the CLI, a running one of alice, and three queued: bob's, alice's
    (asking for 2 GPUs) and one of the home's token; ids 1 to 5."""
    with Store(home / "tunelab.db") as store:
        done = store.create_run({"model_name": "org/base"}, "org/base", "data.jsonl", display_name="finished")
        store.finalize_run(done, status="completed", total_steps=10, final_step=10, final_loss=0.5)
        store.create_run({"model_name": "org/base"}, "org/base", "d", display_name="training", owned_by="alice",
                         devices=["cpu"], claimed_by="server-a")
        ids = {"done": done, "running": done + 1}
        ids["bob"] = store.create_run({"model_name": "m"}, "m", "d", display_name="bobs", owned_by="bob", queued=True)
        ids["alice"] = store.create_run({"model_name": "m"}, "m", "d", display_name="alices", owned_by="alice",
                                        queued=True, device_request={"num_gpus": 2})
        ids["local"] = store.create_run({"model_name": "m"}, "m", "d", display_name="locals", queued=True)
    return ids


def queue_order(home) -> list[int]:
    with Store(home / "tunelab.db") as store:
        return [r["id"] for r in store.queued_runs()]


def row_of(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if name in line)


def test_runs_lists_queued_runs_first_with_place_and_owner(home, lab):
    store = Store(home / "tunelab.db")
    store.set_queue_priority(lab["local"], 5)
    result = cli("runs")
    assert result.exit_code == 0, result.output
    names = [n for n in re.findall(r"\b(locals|bobs|alices|training|finished)\b", result.output)]
    assert names == ["locals", "bobs", "alices", "training", "finished"]
    assert re.search(r"queued\s+#1 p5\s+locals", row_of(result.output, "locals"))
    assert re.search(r"queued\s+#2\s+bob\s", row_of(result.output, "bobs"))
    assert re.search(r"queued\s+#3\s+alice\s", row_of(result.output, "alices"))
    assert re.search(r"running\s+alice\s", row_of(result.output, "training"))
    # Runs of the home's token or the CLI have no owner: nothing between status and name.
    assert re.search(rf"^\s*{lab['done']}\s+completed\s+finished", row_of(result.output, "finished"))
    listed = json.loads(cli("runs", "--json").output)
    assert [r["id"] for r in listed] == [lab["local"], lab["bob"], lab["alice"], lab["running"], lab["done"]]
    assert [r.get("queue_position") for r in listed[:3]] == [1, 2, 3] and listed[2]["owner"] == "alice"
    # The narrow table still fits 80 columns; later pages leave the queue out.
    assert max(map(len, cli("runs", columns=80).output.splitlines())) <= 80
    second_page = json.loads(cli("runs", "--json", "--offset", "1").output)
    assert [r["id"] for r in second_page] == [lab["running"], lab["done"]]


def test_queue_list_shows_position_owner_priority_and_devices(home, lab):
    result = cli("queue", "list")
    assert result.exit_code == 0, result.output
    assert re.search(rf"1\s+{lab['bob']}\s+bob\s+0\s+any\s+bobs", result.output)
    assert re.search(rf"2\s+{lab['alice']}\s+alice\s+0\s+2 gpus\s+alices", result.output)
    assert re.search(rf"3\s+{lab['local']}\s+0\s+any\s+locals", result.output)
    rows = json.loads(cli("queue", "list", "--json").output)
    assert [(r["id"], r["queue_position"]) for r in rows] == [(lab["bob"], 1), (lab["alice"], 2), (lab["local"], 3)]
    # The shape GET /api/queue gives its queued runs, so scripts read both alike.
    from tunelab.server.routes_queue import QueuedRun

    assert set(rows[1]) == set(QueuedRun.model_fields) and rows[1]["device_request"] == {"num_gpus": 2}
    assert re.search(r"(\d{4}-)?\d\d-\d\d \d\d:\d\d", row_of(result.output, "alices"))  # queued at


def test_move_and_priority_reorder_the_queue(home, lab):
    moved = cli("queue", "move", str(lab["local"]), "1")
    assert moved.exit_code == 0, moved.output
    assert queue_order(home) == [lab["local"], lab["bob"], lab["alice"]]
    assert re.search(rf"1\s+{lab['local']}\s", moved.output)  # the new order is printed
    assert cli("queue", "priority", str(lab["alice"]), "3").exit_code == 0
    assert queue_order(home) == [lab["alice"], lab["local"], lab["bob"]]
    # Above a higher priority is no place for it: the refusal names the places it can take.
    refused = cli("queue", "move", str(lab["bob"]), "1")
    assert refused.exit_code == 2 and "positions 2 to 3" in refused.output
    assert queue_order(home) == [lab["alice"], lab["local"], lab["bob"]]
    assert cli("queue", "move", str(lab["bob"]), "0").exit_code == 2  # positions start at 1


def test_cancel_withdraws_a_queued_run_and_refuses_what_is_not_queued(home, lab):
    result = cli("queue", "cancel", str(lab["bob"]))
    assert result.exit_code == 0, result.output
    assert f"cancelled run {lab['bob']}" in result.output
    assert Store(home / "tunelab.db").get_run(lab["bob"])["status"] == "cancelled"
    assert queue_order(home) == [lab["alice"], lab["local"]]
    again = cli("queue", "cancel", str(lab["bob"]))
    assert again.exit_code == 1 and "cancelled, not queued" in again.output
    running = cli("queue", "cancel", str(lab["running"]))
    assert running.exit_code == 1 and "it has started" in running.output
    missing = cli("queue", "move", "999", "1")
    assert missing.exit_code == 1 and "run 999 does not exist" in missing.output
    not_queued = cli("queue", "priority", str(lab["done"]), "1")
    assert not_queued.exit_code == 1 and "completed, not queued" in not_queued.output


def test_a_cancel_that_loses_to_a_servers_claim_changes_nothing(home, lab):
    # A server claimed the run between the user's look and the cancel: the claim stands.
    store = Store(home / "tunelab.db")
    assert store.claim_queued(lab["alice"], "server-b", ["gpu-0", "gpu-1"])
    result = cli("queue", "cancel", str(lab["alice"]))
    assert result.exit_code == 1 and "running, not queued" in result.output and "it has started" in result.output
    run = store.get_run(lab["alice"])
    assert run["status"] == "running" and run["devices"] == ["gpu-0", "gpu-1"]


def test_device_text_names_what_a_run_asked_for():
    assert device_text(None) == "any"
    assert device_text({"num_gpus": 1}) == "1 gpu" and device_text({"num_gpus": 4}) == "4 gpus"
    assert device_text({"gpu_ids": [0, 3]}) == "gpus 0,3"
    assert device_text('{"num_gpus": 2}') == "2 gpus"
