"""The inference host with a real child on a run's checkpoint: answers are stoppable (in
progress or still queued), bounded by the time cap, and the child closes when idle."""

from __future__ import annotations

import time

import pytest

from inference_helpers import Reference
from tunelab import paths
from tunelab.inference.host import InferenceHost
from tunelab.inference.settings import MAX_TIME_ENV, Sampling
from tunelab.inference.target import resolve_target
from tunelab.store import Store

pytestmark = pytest.mark.slow

ENDLESS = Sampling(temperature=0, max_new_tokens=2000, min_new_tokens=2000)
# Idle close for this host, and how long it may take to be seen (it is checked every idle/4 s).
IDLE_S = 5.0
CLOSE_BOUND_S = 60


@pytest.fixture(scope="module")
def checkpoint_target(trained):
    with Store(trained.home / "tunelab.db") as store:
        return resolve_target(store.get_run(trained.run_id), trained.run_id, 2)


def test_a_checkpoint_answers_stops_and_closes_when_idle(trained, checkpoint_target, monkeypatch):
    monkeypatch.setenv("TUNELAB_HOME", str(trained.home))
    host = InferenceHost(paths.locks_dir(trained.home / "tunelab.db"), idle_seconds=IDLE_S)
    try:
        question = [{"role": "user", "content": "Name a colour."}]
        answer = host.start(checkpoint_target, messages=question, sampling=Sampling(temperature=0, max_new_tokens=6))
        said = answer.text()
        assert host.status()["model"] == f"run-{trained.run_id}-checkpoint-2"

        # A stop ends the answer in progress at its next token; one still queued never starts.
        running = host.start(checkpoint_target, prompt="Once upon a time", sampling=ENDLESS)
        queued = host.start(checkpoint_target, prompt="Once upon a time", sampling=ENDLESS, adapter=False)
        pieces = running.events()
        assert next(pieces)
        queued.stop()
        running.stop()
        list(pieces)
        assert running.finish_reason == "cancelled" and 0 < running.completion_tokens < 2000
        assert queued.text() == "" and queued.finish_reason == "cancelled" and queued.completion_tokens == 0

        # The time cap ends an answer that max_new_tokens would let run on.
        monkeypatch.setenv(MAX_TIME_ENV, "1")
        capped = host.start(checkpoint_target, prompt="Once upon a time", sampling=ENDLESS)
        capped.text()
        assert capped.finish_reason == "length" and capped.timed_out and capped.completion_tokens < 2000

        child = host._child
        # The checkpoint's own weights answered (compared once the child may go idle).
        assert said == Reference(trained, checkpoint_target.weights).chat(question, 6)
        deadline = time.monotonic() + CLOSE_BOUND_S
        while host.status()["model"] is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert host.status()["model"] is None
        assert child.process.poll() is not None  # the process itself has ended
        assert host.status()["finished"] == 4
    finally:
        host.close()
