"""The `tunelab` CLI as a user runs it: real subprocesses, a real home, real training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

TUNELAB = [sys.executable, "-m", "tunelab.cli"]
# The end-to-end runs go through both training backends: same CLI, same events, same store.
BACKENDS = [pytest.param("torch"), pytest.param("mlx", marks=pytest.mark.mlx)]


def needs_backend(backend: str) -> None:
    if backend == "mlx":
        pytest.importorskip("mlx.core", reason="the mlx backend needs `pip install mlx[cpu] mlx-lm`")


def run_cli(args, home: Path, timeout=180, **kw):
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160"}
    return subprocess.run(TUNELAB + args, env=env, capture_output=True, text=True, timeout=timeout, **kw)


def write_config(path: Path, demo_assets, **overrides) -> Path:
    cfg = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
           "max_steps": 8, "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1,
           "learning_rate": 2e-3, **overrides}
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_bad_config_exits_2_naming_the_field(tmp_path, home, demo_assets):
    config = write_config(tmp_path / "run.yaml", demo_assets, learning_rate=3)
    result = run_cli(["train", str(config)], home)
    assert result.returncode == 2, result.stderr
    assert "learning_rate" in result.stderr and "Traceback" not in result.stderr + result.stdout


def test_unknown_override_suggests_the_field(tmp_path, home, demo_assets):
    config = write_config(tmp_path / "run.yaml", demo_assets)
    result = run_cli(["train", str(config), "--set", "lora_rank=8"], home)
    assert result.returncode == 2
    assert "did you mean 'lora_r'" in result.stderr


def test_missing_config_file_exits_2(tmp_path, home):
    result = run_cli(["train", str(tmp_path / "nope.yaml")], home)
    assert result.returncode == 2 and "cannot read" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_train_completes_then_runs_and_show_list_it(tmp_path, home, demo_assets, backend):
    needs_backend(backend)
    config = write_config(tmp_path / "run.yaml", demo_assets, display_name="cli run", backend=backend)
    result = run_cli(["train", str(config)], home)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(run_cli(["runs", "--json"], home).stdout)
    assert [r["status"] for r in runs] == ["completed"]
    assert runs[0]["final_step"] == 8 and runs[0]["display_name"] == "cli run"
    shown = run_cli(["show", str(runs[0]["id"])], home)
    assert shown.returncode == 0 and "completed" in shown.stdout and runs[0]["output_dir"] in shown.stdout.replace("\n", "")
    detail = json.loads(run_cli(["show", str(runs[0]["id"]), "--json"], home).stdout)
    assert [m["step"] for m in detail["metrics"]] == list(range(1, 9))
    assert run_cli(["show", "999"], home).returncode == 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_stops_and_saves_then_resume_continues(tmp_path, home, demo_assets, backend):
    needs_backend(backend)
    config = write_config(tmp_path / "run.yaml", demo_assets, max_steps=400, max_seq_length=128, backend=backend)
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160"}
    # Own process group, like a terminal: Ctrl-C reaches the CLI *and* its worker child.
    proc = subprocess.Popen(TUNELAB + ["train", str(config)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 120
    db = home / "tunelab.db"
    while time.time() < deadline:
        if db.exists() and _steps_logged(db) >= 3:
            break
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    run = json.loads(run_cli(["runs", "--json"], home).stdout)[0]
    assert run["status"] == "stopped", run
    stopped_at = run["final_step"]
    assert (Path(run["output_dir"]) / f"checkpoint-{stopped_at}").is_dir()

    resumed = run_cli(["resume", str(run["id"])], home, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    newest = json.loads(run_cli(["runs", "--json"], home).stdout)[0]
    assert newest["resumed_from_run_id"] == run["id"] and newest["status"] == "completed"
    steps = [m["step"] for m in json.loads(run_cli(["show", str(newest["id"]), "--json"], home).stdout)["metrics"]]
    assert steps[0] == stopped_at + 1 and steps[-1] == 400
    again = run_cli(["resume", str(run["id"])], home)
    assert again.returncode != 0 and "resumed" in (again.stderr + again.stdout)


def _steps_logged(db: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COALESCE(MAX(step), 0) FROM metrics").fetchone()[0]
    except sqlite3.Error:
        return 0
