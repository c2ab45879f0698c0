"""1,000 malformed messages injected into the event pump, interleaved with real steps:
Python objects that are no valid event and raw frames that do not even unpickle. The
pump skips every one, the run completes, and every real step is streamed and stored."""

from __future__ import annotations

from fault_workers import GARBAGE_COUNT
from harness import worker_env
from scenarios import run_to_end

STEPS = 20


def test_garbage_events_are_skipped_and_the_run_completes(start_server, demo_run):
    server = start_server(extra_env=worker_env("fault_workers:garbage_flood"))
    ending = run_to_end(server, demo_run(max_steps=STEPS))
    row = ending.row
    assert row["status"] == "completed", row["error_message"]
    assert ending.final_event["status"] == "completed"
    assert ending.status_answer["malformed_events"] == GARBAGE_COUNT
    assert ending.streamed_steps == row["metrics"]["steps"] == list(range(1, STEPS + 1))
    assert row["final_step"] == STEPS
    assert ending.worker_gone and ending.leftovers == []
