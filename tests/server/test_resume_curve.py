"""A resumed run through a real server and real training: its detail carries the steps of
the run it continues (the whole curve, as every caller who may read that run sees it),
each run's export lands in a folder of its own, and `tunelab show` says where it resumed
from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sse_helpers import final_event, start_run, stream_until_end
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

pytestmark = pytest.mark.slow  # trains through a real worker, twice

LONG = 400  # long enough that each stop lands mid-training


def stop_and_save_after(client: httpx.Client, run_id: int, step: int) -> int:
    """Let `run_id` (the newest run) reach `step`, stop it with a save; its final step."""
    seen = stream_until_end(client, params={"last_event_id": 0}, until_step=step)
    assert client.post("/api/train/stop", json={"save": True, "expected_job_id": run_id}).status_code == 200
    end = final_event(stream_until_end(client, headers={"Last-Event-ID": seen[-1].id}))
    assert end.event == "complete" and end.data["status"] == "stopped", end.data
    return end.data["final_step"]


def test_a_resumed_run_carries_its_whole_curve_and_exports_into_its_own_folder(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    viewer = new_secret()
    with Store(home / "tunelab.db") as store:
        store.add_api_key("viewer", "viewer", secret_hash(viewer))
    server = start_server(home=home)
    client = server.client()

    first = start_run(client, demo_run(max_steps=LONG))
    first_at = stop_and_save_after(client, first, 3)
    assert client.post("/api/train/reset").status_code == 200
    resumed = client.post(f"/api/runs/{first}/resume")
    assert resumed.status_code == 200, resumed.text
    second = resumed.json()["job_id"]
    second_at = stop_and_save_after(client, second, first_at + 2)

    # The second run's own steps start after the resume point; the first run's lead up to it.
    one, two = (client.get(f"/api/runs/{n}").json() for n in (first, second))
    assert two["metrics"]["steps"][0] == first_at + 1 and two["metrics"]["steps"][-1] == second_at
    [earlier] = two["earlier_runs"]
    assert (earlier["run_id"], earlier["until_step"], earlier["status"]) == (first, first_at, "stopped")
    assert earlier["metrics"]["steps"] == list(range(1, first_at + 1)) == one["metrics"]["steps"]
    assert earlier["metrics"]["loss"] == one["metrics"]["loss"]
    assert earlier["metrics"]["extra"] == one["metrics"]["extra"]
    assert one["earlier_runs"] == []
    # A viewer may read the first run itself, so it sees the same chain.
    as_viewer = server.client(token=viewer)
    assert as_viewer.get(f"/api/runs/{first}").status_code == 200
    assert as_viewer.get(f"/api/runs/{second}").json()["earlier_runs"] == two["earlier_runs"]

    # Both runs share one folder; each export lands in a folder of its own.
    folder = Path(one["output_dir"])
    assert Path(two["output_dir"]) == folder
    exported_one = client.post(f"/api/runs/{first}/export", json={"format": "adapter"})
    assert exported_one.status_code == 200, exported_one.text
    dest_one = Path(exported_one.json()["dest"])
    assert dest_one == folder / "export-adapter" and exported_one.json()["step"] == first_at
    before = {p.name: p.read_bytes() for p in dest_one.iterdir()}
    exported_two = client.post(f"/api/runs/{second}/export", json={"format": "adapter"})
    assert exported_two.status_code == 200, exported_two.text
    dest_two = Path(exported_two.json()["dest"])
    assert dest_two == folder / f"run-{second}-export-adapter" and exported_two.json()["step"] == second_at
    assert {p.name: p.read_bytes() for p in dest_one.iterdir()} == before  # the first run's export is untouched
    assert (dest_two / "adapter_model.safetensors").read_bytes() != before["adapter_model.safetensors"]
    for run_id, dest in ((first, dest_one), (second, dest_two)):
        assert json.loads((dest / "tunelab-export.json").read_text())["run_id"] == run_id
        listed = client.get(f"/api/runs/{run_id}/exports").json()["exports"]
        assert [Path(e["folder"]) for e in listed] == [dest]

    # The CLI says where the run's curve begins, and what continued the first.
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200"}
    shown = [subprocess.run([sys.executable, "-m", "tunelab.cli.main", "show", str(n)], env=env, capture_output=True,
                            text=True, timeout=120) for n in (second, first)]
    assert all(s.returncode == 0 for s in shown), [s.stderr for s in shown]
    assert f"resumed from run {first} at step {first_at}" in shown[0].stdout
    assert f"resumed as: run {second}" in shown[1].stdout and "resumed from" not in shown[1].stdout
