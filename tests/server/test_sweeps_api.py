"""`POST /api/sweeps` on a live server: a sweep's trials are the server's ordinary runs
(scripted workers that report an eval_loss), listed with the best run by `GET /api/sweeps`;
a bad sweep is a 422 naming the field, before any run starts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweeps"))
from sse_helpers import scripted_worker_env  # noqa: E402
from sweep_helpers import HERE as SWEEP_TESTS  # noqa: E402

WAIT_S = 120


def sweep_body(demo_run, **overrides):
    base = {**demo_run(max_steps=4), "eval_steps": 1, "eval_holdout": 0.2}
    return {"name": "api-sweep", "base": base, "trials": 3, "pruner_startup_trials": 1, "seed": 3,
            "space": {"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "lora_r": {"choice": [8, 16, 32]}}, **overrides}


def test_a_sweep_over_http_runs_its_trials_as_runs_and_names_the_best(start_server, demo_run):
    env = scripted_worker_env(step_seconds=0.1)
    env["PYTHONPATH"] = f"{SWEEP_TESTS}:{env['PYTHONPATH']}"
    env["TUNELAB_WORKER_TARGET"] = "sweep_workers:evaluating_trainer"
    server = start_server(extra_env=env)
    with server.client() as client:
        answer = client.post("/api/sweeps", json=sweep_body(demo_run))
        assert answer.status_code == 202, answer.text
        again = client.post("/api/sweeps", json=sweep_body(demo_run))
        assert again.status_code == 409 and again.json()["error"]["field"] == "name"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            (sweep,) = client.get("/api/sweeps").json()
            if not sweep["running"]:
                break
            time.sleep(0.2)
        assert not sweep["running"], sweep
        assert [t["trial"] for t in sweep["trials"]] == [0, 1, 2]
        runs = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert {t["run_id"] for t in sweep["trials"]} == set(runs)
        complete = [t for t in sweep["trials"] if t["state"] == "complete"]
        assert sweep["best_run_id"] == min(complete, key=lambda t: t["value"])["run_id"]
        assert all(runs[t["run_id"]]["status"] in ("completed", "stopped") for t in sweep["trials"])


def test_a_bad_sweep_is_a_422_naming_the_field_and_starts_nothing(start_server, demo_run):
    server = start_server(extra_env=scripted_worker_env())
    with server.client() as client:
        answer = client.post("/api/sweeps", json=sweep_body(demo_run, space={"lora_rank": {"choice": [8]}}))
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "space.lora_rank", answer.text
        outside = sweep_body(demo_run)
        outside["base"]["local_datasets"] = ["/etc/passwd"]
        assert client.post("/api/sweeps", json=outside).status_code in (403, 422)
        assert client.get("/api/runs").json()["runs"] == []
        assert client.get("/api/sweeps").json() == []
