"""export_after in the worker, the paths that export nothing: none asked, a stop that
arrived as training ended, a worker not told its run id. Each says so in the run's
message and in a status event, and leaves no export folder. (The export itself, through a
real run: tests/export/test_export_after.py.)"""

from __future__ import annotations

import queue

from typed_config import typed
from tunelab.worker.context import WorkerContext
from tunelab.worker.export_after import export_after_training


def _sent(events: queue.Queue) -> list[dict]:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out


def test_nothing_asked_exports_nothing_and_says_nothing(tmp_path):
    events: queue.Queue = queue.Queue()
    assert export_after_training(WorkerContext(events), typed({"run_id": 1}), None, tmp_path) == ""
    assert _sent(events) == [] and list(tmp_path.iterdir()) == []


def test_a_stop_as_training_ended_skips_the_export_and_says_so(tmp_path):
    events: queue.Queue = queue.Queue()
    ctx = WorkerContext(events)
    ctx.request_stop(save=True)
    note = export_after_training(ctx, typed({"export_after": "merged", "run_id": 3}), None, tmp_path)
    assert note.startswith("; merged export skipped: a stop was requested"), note
    assert [e["message"] for e in _sent(events)] == [note.removeprefix("; ")]
    assert list(tmp_path.iterdir()) == []


def test_a_worker_without_its_run_id_skips_the_export_and_says_so(tmp_path):
    events: queue.Queue = queue.Queue()
    note = export_after_training(WorkerContext(events), typed({"export_after": "adapter"}), None, tmp_path)
    assert note.startswith("; adapter export skipped: this worker was not told its run id"), note
    assert len(_sent(events)) == 1 and list(tmp_path.iterdir()) == []
