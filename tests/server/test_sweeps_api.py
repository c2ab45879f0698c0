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


def test_a_trial_reads_the_data_file_its_check_allowed(start_server, demo_run):
    # A relative data path is checked against the datasets root; the trial must train on that
    # same file (its resolved path), never on whatever the name means in the server's folder.
    env = scripted_worker_env(step_seconds=0.05)
    env["PYTHONPATH"] = f"{SWEEP_TESTS}:{env['PYTHONPATH']}"
    env["TUNELAB_WORKER_TARGET"] = "sweep_workers:evaluating_trainer"
    server = start_server(extra_env=env)
    datasets = server.home / "datasets"
    datasets.mkdir(parents=True, exist_ok=True)
    body = sweep_body(demo_run, trials=1, name="relative-data")
    (datasets / "sweep-rows.jsonl").write_bytes(Path(body["base"]["local_datasets"][0]).read_bytes())
    body["base"]["local_datasets"] = ["sweep-rows.jsonl"]
    with server.client() as client:
        assert client.post("/api/sweeps", json=body).status_code == 202
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            (sweep,) = client.get("/api/sweeps").json()
            if not sweep["running"]:
                break
            time.sleep(0.2)
        (trial,) = sweep["trials"]
        assert trial["run_id"] is not None, sweep
        run = client.get(f"/api/runs/{trial['run_id']}").json()
        assert run["config"]["local_datasets"] == [str((datasets / "sweep-rows.jsonl").resolve())], run["config"]


def test_a_sweep_id_is_read_as_plain_digits_and_a_long_one_is_a_422_not_a_500(start_server):
    """The fuzzer's find: `/api/sweeps/<25 digits>/stop` reached the store, which cannot bind an
    integer past 64 bits, and answered 500. Every spelling but plain digits is now a 422 on
    `sweep_id`; plain digits of a sweep that does not exist are a 404."""
    server = start_server(extra_env=scripted_worker_env())
    with server.client() as client:
        for spelling in ("8805051940647514790690816", "1.0", "01", "+1", "1e0", "0", "-1"):
            answer = client.post(f"/api/sweeps/{spelling}/stop")
            assert answer.status_code == 422, (spelling, answer.status_code, answer.text)
            assert "sweep_id" in answer.text and "a sweep id is plain digits" in answer.text, answer.text
        missing = client.post("/api/sweeps/999999999999999999/stop")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "sweep_not_found", missing.text
