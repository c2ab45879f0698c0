"""`tunelab sweep` as a user runs it: a real CLI process, real trial workers (scripted:
they report an eval_loss from their learning rate and rank), a real SQLite history."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_helpers import TUNELAB, sweep_env, write_sweep  # noqa: E402
from tunelab.store import Store  # noqa: E402
from tunelab.store import sweeps as table  # noqa: E402
from tunelab.sweeps import study as studies  # noqa: E402

WAIT_S = 120


def run_sweep(args, home: Path, step_seconds: float = 0.2) -> subprocess.CompletedProcess:
    return subprocess.run(TUNELAB + args, env=sweep_env(home, step_seconds), capture_output=True, text=True,
                          timeout=WAIT_S)


def optuna_states(store: Store, sweep_id: int) -> dict[int, str]:
    return {t.number: t.state.name for t in studies.load_study(store, sweep_id).get_trials(deepcopy=False)}


def test_sweep_runs_every_trial_as_a_run_and_records_the_best(tmp_path, home):
    result = run_sweep(["sweep", str(write_sweep(tmp_path / "sweep.yaml"))], home)
    assert result.returncode == 0, result.stdout + result.stderr
    store = Store()
    sweep = table.get_sweep(store, "lr-rank")
    trials = table.list_trials(store, sweep["id"])
    assert [t["trial"] for t in trials] == [0, 1, 2, 3]
    runs = {t["run_id"]: store.get_run(t["run_id"]) for t in trials}
    assert len(runs) == 4 and all(runs.values())
    for t in trials:  # each trial is an ordinary run, named after its sweep and trial number
        assert runs[t["run_id"]]["display_name"] == f"lr-rank #{t['trial']}"
        assert runs[t["run_id"]]["config"]["learning_rate"] == pytest.approx(t["params"]["learning_rate"])
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned, "the median pruner stopped no trial"
    assert all(runs[t["run_id"]]["status"] == "stopped" for t in pruned)  # stopped and saved, as any stop
    complete = [t for t in trials if t["state"] == "complete"]
    best = min(complete, key=lambda t: t["value"])
    assert (sweep["best_run_id"], sweep["best_value"]) == (best["run_id"], best["value"])
    states = optuna_states(store, sweep["id"])
    assert {n: s.lower() for n, s in states.items()} == {t["trial"]: t["state"] for t in trials}
    shown = run_sweep(["sweep", "show", str(sweep["id"])], home)
    assert shown.returncode == 0 and f"best: run {best['run_id']}" in shown.stdout
    assert "pruned" in shown.stdout
    run_shown = run_sweep(["show", str(pruned[0]["run_id"])], home)  # the run says it is a pruned trial
    assert f"sweep: lr-rank ({sweep['id']}), trial {pruned[0]['trial']}, pruned" in run_shown.stdout


MORE_GPUS_THAN_ANY_MACHINE = 4096


@pytest.mark.parametrize("change, field", [
    ({"space": {"learning_rate": {"log_uniform": [0, 1e-3]}}}, "space.learning_rate"),
    ({"space": {"lora_r": {"choice": [8, 16]}, "num_gpus": {"choice": [1, MORE_GPUS_THAN_ANY_MACHINE]}}}, "space.num_gpus"),
    ({"space": {"lora_r": {"choice": [8, 16]}, "gradient_accumulation_steps": {"int": [1, 2]}},
      "base": {"model_name": "scripted/tiny", "local_datasets": ["/nowhere/train.jsonl"], "num_gpus": MORE_GPUS_THAN_ANY_MACHINE,
               "eval_steps": 1}}, "base.num_gpus"),
], ids=["log range over zero", "a field that cannot be searched", "more GPUs than this machine has"])
def test_bad_sweep_exits_2_naming_the_field_and_starts_nothing(tmp_path, home, change, field):
    path = write_sweep(tmp_path / "sweep.yaml", **change)
    result = run_sweep(["sweep", str(path)], home)
    assert result.returncode == 2, result.stdout + result.stderr
    assert field in result.stderr and "Traceback" not in result.stderr + result.stdout
    assert Store().list_runs() == []


def test_a_sweep_killed_mid_trial_resumes_without_losing_or_recounting_a_trial(tmp_path, home):
    path = write_sweep(tmp_path / "sweep.yaml", pruner="none")  # every trial runs all its steps: time to kill one
    first = subprocess.Popen(TUNELAB + ["sweep", str(path)], env=sweep_env(home, 0.4), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        store = _wait_for_a_trial_mid_run(first)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    sweep = table.get_sweep(store, "lr-rank")
    before = {t["trial"]: t for t in table.list_trials(store, sweep["id"])}
    cut = [n for n, t in before.items() if t["state"] == "running"]
    assert cut, before

    result = run_sweep(["sweep", str(path)], home)
    assert result.returncode == 0, result.stdout + result.stderr
    after = {t["trial"]: t for t in table.list_trials(store, sweep["id"])}
    for number, trial in before.items():  # what had finished stays as it was
        if number not in cut:
            assert after[number] == trial
    for number in cut:  # cut short: closed and kept out of the budget, its run not left running; or, when
        # the study had already been told its end as the process died, that end is kept
        assert after[number]["state"] in ("interrupted", "complete", "pruned")
        assert store.get_run(after[number]["run_id"])["status"] in ("error", "stopped", "completed")
    counted = [t for t in after.values() if t["state"] in table.COUNTED_STATES]
    assert len(counted) == 4 == table.counted_trials(store, sweep["id"])
    states = optuna_states(store, sweep["id"])
    assert sorted(states) == sorted(after)  # every Optuna trial is a recorded trial, once
    assert {n: t["state"] for n, t in after.items()} == {
        n: {"FAIL": "interrupted"}.get(s, s.lower()) for n, s in states.items()}
    run_ids = [t["run_id"] for t in after.values()]
    assert len(set(run_ids)) == len(run_ids) and {r["id"] for r in store.list_runs()} == set(run_ids)


def _wait_for_a_trial_mid_run(process: subprocess.Popen) -> Store:
    """Wait until one trial has ended and the next one's run is training."""
    deadline = time.monotonic() + WAIT_S
    store = None
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            store = store or Store()
            sweep = table.get_sweep(store, "lr-rank")
        except Exception:  # the first process is still creating the database
            sweep = None
        if sweep is not None and table.counted_trials(store, sweep["id"]) >= 1:
            running = [t for t in table.list_trials(store, sweep["id"]) if t["state"] == "running"]
            if running and (store.get_run(running[0]["run_id"]) or {}).get("status") == "running":
                return store
        time.sleep(0.1)
    raise AssertionError("no trial was mid-run in time")


def test_a_grid_sweep_tries_each_point_once_and_stops(tmp_path, home):
    path = write_sweep(tmp_path / "sweep.yaml", sampler="grid", pruner="none", trials=5,
                       space={"lora_r": {"choice": [8, 32]}, "num_epochs": {"int": [1, 2]}})
    result = run_sweep(["sweep", str(path)], home, step_seconds=0)
    assert result.returncode == 0, result.stdout + result.stderr
    store = Store()
    trials = table.list_trials(store, table.get_sweep(store, "lr-rank")["id"])
    assert sorted((t["params"]["lora_r"], t["params"]["num_epochs"]) for t in trials) == [(8, 1), (8, 2), (32, 1), (32, 2)]
    # The last point too ends recorded (the grid sampler's stop after it is not an error here).
    assert [t["state"] for t in trials] == ["complete"] * 4, trials


def test_a_sweep_on_the_demo_model_trains_real_trials(tmp_path, home, demo_assets):
    """The real trainer: eval_loss on a held-out split streams to the study from each trial."""
    base = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 8,
            "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1, "eval_steps": 2, "eval_holdout": 0.2}
    path = write_sweep(tmp_path / "sweep.yaml", base=base, seed=1,
                       space={"learning_rate": {"log_uniform": [1e-4, 1e-2]}, "lora_r": {"choice": [4, 16]}})
    env = {k: v for k, v in sweep_env(home, 0).items() if k != "TUNELAB_WORKER_TARGET"}
    result = subprocess.run(TUNELAB + ["sweep", str(path)], env=env, capture_output=True, text=True, timeout=WAIT_S * 3)
    assert result.returncode == 0, result.stdout + result.stderr
    store = Store()
    sweep = table.get_sweep(store, "lr-rank")
    trials = table.list_trials(store, sweep["id"])
    assert [t["trial"] for t in trials] == [0, 1, 2, 3]
    assert all(t["state"] in ("complete", "pruned") and t["value"] is not None for t in trials), trials
    for t in trials:  # the objective is the run's own last stored eval_loss
        evals = [m["eval_loss"] for m in store.get_metrics(t["run_id"]) if m["eval_loss"] is not None]
        assert evals and t["value"] == pytest.approx(evals[-1])
    assert sweep["best_run_id"] in {t["run_id"] for t in trials if t["state"] == "complete"}
