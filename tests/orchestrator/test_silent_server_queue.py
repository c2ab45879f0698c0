"""Queued runs of a server whose heartbeat went silent, as another server's scheduler sees
them: one naming files this machine cannot read stays queued; one it can read is taken
over (it becomes this server's, in a folder under this server's outputs root); one whose
secret this server lacks ends `error`, resumable, naming the secret, and a resume that
gives it trains it afresh."""

from __future__ import annotations

import json
import time

import pytest
import scripted_workers as sw
from orch_helpers import WAIT_S, scripted_config

from tunelab import paths
from tunelab.config.run_config import SECRETS_USED_KEY
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

SILENT_S = 0.5


def queued_elsewhere(store: Store, **overrides) -> int:
    cfg = scripted_config(**overrides)
    public = {**cfg.public(), SECRETS_USED_KEY: cfg.secret_names(), "output_dir": "/elsewhere/outputs/run",
              "resume_from": None}
    return store.create_run(public, cfg.model_name, cfg.dataset_label, queued=True, device_request={"num_gpus": 1},
                            server_id="srv-gone")


def wait_status(store: Store, run_id: int, status: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        row = store.get_run(run_id)
        if row["status"] == status:
            return row
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} is {store.get_run(run_id)['status']}, not {status}")


def test_a_silent_servers_queue_is_taken_over_only_where_it_can_run(store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNELAB_SERVER_SILENT_S", str(SILENT_S))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    model = paths.datasets_root() / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = paths.datasets_root() / "train.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    readable = {"model_name": str(model), "local_datasets": [str(data)]}

    store.beat("srv-gone", "elsewhere", "elsewhere:1:aa")
    unreadable = queued_elsewhere(store)  # its data file is on the silent server's machine only
    taken = queued_elsewhere(store, **readable)
    needs_secret = queued_elsewhere(store, hf_token="hf_only_there", **readable)
    time.sleep(SILENT_S * 2)

    here = Orchestrator(store, worker_target=sw.trainer)
    try:
        done = wait_status(store, taken, "completed")
        failed = wait_status(store, needs_secret, "error")
        assert store.get_run(unreadable)["status"] == "queued" and store.get_run(unreadable)["server_id"] == "srv-gone"
        assert done["server_id"] == here.identity.id and done["output_dir"].startswith(str(paths.outputs_root()))
        assert failed["resume_blocked"] is False and "hf_token" in failed["error_message"]
        assert "srv-gone went silent" in failed["error_message"]
        with pytest.raises(Exception, match="hf_token"):
            here.resume(needs_secret)
        again = here.resume(needs_secret, {"hf_token": "hf_given_again"})
        resumed = wait_status(store, again, "completed")
        assert resumed["resumed_from_run_id"] == needs_secret
        assert resumed["output_dir"].startswith(str(paths.outputs_root()))
    finally:
        here.shutdown()
