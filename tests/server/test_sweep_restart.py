"""A server that dies mid-sweep resumes the sweep at its next start: a real server process
killed with SIGKILL while a trial trains, started again on the same home, carries the
sweep on from the trials it had (the cut trial closed and not counted, trial numbers
continuous, the budget reached exactly). A sweep stopped over the API is not resumed.
Trials use the scripted evaluating worker (tests/sweeps/sweep_workers.py)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from sse_helpers import scripted_worker_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweeps"))
from sweep_helpers import HERE as SWEEP_TESTS  # noqa: E402

from tunelab.store import Store  # noqa: E402
from tunelab.store import sweeps as table  # noqa: E402
from tunelab.sweeps import study as studies  # noqa: E402

WAIT_S = 120
TRIALS = 4


def sweep_env(step_seconds: float) -> dict[str, str]:
    env = scripted_worker_env(step_seconds=step_seconds)
    env["PYTHONPATH"] = f"{SWEEP_TESTS}:{env['PYTHONPATH']}"
    env["TUNELAB_WORKER_TARGET"] = "sweep_workers:evaluating_trainer"
    return env


def sweep_body(demo_run) -> dict[str, Any]:
    # No pruner: every trial runs all its steps, which leaves time to kill the server mid-trial.
    return {"name": "restart-sweep", "base": {**demo_run(max_steps=6), "eval_steps": 1, "eval_holdout": 0.2},
            "trials": TRIALS, "pruner": "none", "seed": 3,
            "space": {"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "lora_r": {"choice": [8, 16, 32]}}}


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def the_sweep(server) -> dict[str, Any]:
    with server.client() as client:
        (sweep,) = client.get("/api/sweeps").json()
    return sweep


def mid_trial(home: Path) -> bool:
    """One trial has ended and the next one's run is training."""
    with Store(home / "tunelab.db") as store:
        sweep = table.get_sweep(store, "restart-sweep")
        if sweep is None or table.counted_trials(store, sweep["id"]) < 1:
            return False
        running = [t for t in table.list_trials(store, sweep["id"]) if t["state"] == "running"]
        return bool(running) and (store.get_run(running[0]["run_id"]) or {}).get("status") == "running"


def test_a_server_killed_mid_trial_resumes_its_sweep_at_its_next_start(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    first = start_server(home=home, extra_env=sweep_env(step_seconds=0.4))
    with first.client() as client:
        assert client.post("/api/sweeps", json=sweep_body(demo_run)).status_code == 202
    wait_for(lambda: mid_trial(home), "a trial training after one had ended")
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait()
    with Store(home / "tunelab.db") as store:
        sweep_id = table.get_sweep(store, "restart-sweep")["id"]
        before = {t["trial"]: t for t in table.list_trials(store, sweep_id)}
    cut = [n for n, t in before.items() if t["state"] == "running"]
    assert len(cut) == 1, before

    second = start_server(home=home, extra_env=sweep_env(step_seconds=0.05))
    assert the_sweep(second)["running"], "the restarted server did not resume its sweep"
    done = wait_for(lambda: (lambda s: not s["running"] and s)(the_sweep(second)), "the resumed sweep to finish")
    after = {t["trial"]: t for t in done["trials"]}
    assert sorted(after) == list(range(len(after)))  # trial numbers continue, none skipped or reused
    for number, trial in before.items():
        if number not in cut:  # what had ended stays as it was
            assert {k: after[number][k] for k in ("state", "value", "run_id")} == \
                {k: trial[k] for k in ("state", "value", "run_id")}
    (number,) = cut
    assert after[number]["state"] == "interrupted" and after[number]["run_status"] == "error", after[number]
    counted = [t for t in after.values() if t["state"] in table.COUNTED_STATES]
    assert len(counted) == TRIALS and len(after) == TRIALS + 1  # the budget reached exactly, the cut trial on top
    with Store(home / "tunelab.db") as store:
        states = {t.number: t.state.name for t in studies.load_study(store, sweep_id).get_trials(deepcopy=False)}
        assert {n: {"FAIL": "interrupted"}.get(s, s.lower()) for n, s in states.items()} == \
            {n: t["state"] for n, t in after.items()}  # each Optuna trial is one recorded trial
        run_ids = [t["run_id"] for t in after.values()]
        assert len(set(run_ids)) == len(run_ids) and {r["id"] for r in store.list_runs()} == set(run_ids)
        assert table.get_sweep(store, sweep_id)["server_id"] is None  # finished: no server runs it now
    complete = [t for t in after.values() if t["state"] == "complete"]
    assert done["best_run_id"] == min(complete, key=lambda t: t["value"])["run_id"]

    second.stop()
    third = start_server(home=home, extra_env=sweep_env(step_seconds=0.05))
    assert not the_sweep(third)["running"]  # a finished sweep is not started again


def test_a_stopped_sweep_is_not_resumed_but_one_cut_by_a_shutdown_is(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    server = start_server(home=home, extra_env=sweep_env(step_seconds=0.4))
    with server.client() as client:
        sweep_id = client.post("/api/sweeps", json=sweep_body(demo_run)).json()["id"]
        wait_for(lambda: mid_trial(home), "a trial training")
        server.stop()  # SIGTERM: the server shuts down with the sweep still to run
    again = start_server(home=home, extra_env=sweep_env(step_seconds=0.4))
    with again.client() as client:
        assert the_sweep(again)["running"], "a sweep cut by a shutdown was not resumed"
        stopped = client.post(f"/api/sweeps/{sweep_id}/stop")
        assert stopped.status_code == 200, stopped.text
        wait_for(lambda: not the_sweep(again)["running"], "the sweep to stop")
        assert client.post(f"/api/sweeps/{sweep_id}/stop").json()["error"]["code"] == "sweep_not_running"
        assert client.post("/api/sweeps/999/stop").status_code == 404
    counted = [t for t in the_sweep(again)["trials"] if t["state"] in table.COUNTED_STATES]
    assert len(counted) < TRIALS
    again.stop()
    last = start_server(home=home, extra_env=sweep_env(step_seconds=0.05))
    time.sleep(1)
    sweep = the_sweep(last)
    assert not sweep["running"] and len([t for t in sweep["trials"] if t["state"] in table.COUNTED_STATES]) == len(counted)


def test_a_sweep_another_live_server_runs_is_not_taken(start_server, demo_run, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {**sweep_env(step_seconds=0.4), "TUNELAB_DATABASE_URL": url}
    a = start_server(home=tmp_path / "a", extra_env=env)
    with a.client() as client:
        assert client.post("/api/sweeps", json=sweep_body(demo_run)).status_code == 202
    b = start_server(home=tmp_path / "b", extra_env=env)
    with b.client() as client:
        taken = client.post("/api/sweeps", json=sweep_body(demo_run))
        assert taken.status_code == 409, taken.text
        assert (tmp_path / "a" / "server-id").read_text().strip() in taken.json()["error"]["message"]
        assert not the_sweep(b)["running"] and the_sweep(a)["running"]


def test_a_member_stops_only_the_sweeps_its_key_started(start_server, demo_run, tmp_path):
    from tunelab.keys import new_secret, secret_hash

    home = tmp_path / "home"
    home.mkdir()
    secrets = {name: new_secret() for name in ("alice", "bob")}
    with Store(home / "tunelab.db") as store:
        for name, secret in secrets.items():
            store.add_api_key(name, "member", secret_hash(secret))
    server = start_server(home=home, extra_env=sweep_env(step_seconds=0.4))
    alice, bob = server.client(token=secrets["alice"]), server.client(token=secrets["bob"])
    sweep_id = alice.post("/api/sweeps", json=sweep_body(demo_run)).json()["id"]
    refused = bob.post(f"/api/sweeps/{sweep_id}/stop")
    assert refused.status_code == 403 and "alice" in refused.json()["error"]["message"], refused.text
    assert the_sweep(server)["running"] and the_sweep(server)["started_by"] == "alice"
    assert alice.post(f"/api/sweeps/{sweep_id}/stop").status_code == 200
    wait_for(lambda: not the_sweep(server)["running"], "the sweep to stop")
    runs = {r["id"]: r for r in alice.get("/api/runs").json()["runs"]}
    assert runs and all(r["owner"] == "alice" for r in runs.values())  # its trials are alice's runs
