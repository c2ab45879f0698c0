"""The `tunelab` CLI as a user runs it: real subprocesses, a real home, real training."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]
# The end-to-end runs go through both training backends: same CLI, same events, same store.
BACKENDS = [pytest.param("torch"), pytest.param("mlx", marks=pytest.mark.mlx)]
CTRL_C_STEPS = 100


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
    assert runs[0]["final_step"] == 8 and runs[0]["display_name"] == "cli run" and runs[0]["modality"] == "text"
    shown = run_cli(["show", str(runs[0]["id"])], home)
    assert shown.returncode == 0 and "completed" in shown.stdout and runs[0]["output_dir"] in shown.stdout.replace("\n", "")
    assert "modality: text" in shown.stdout
    if backend == "torch":  # the last value of each extra metric TRL logged (the mlx loop logs none)
        assert re.search(r"^    mean_token_accuracy: [0-9.]+ \(step 8\)$", shown.stdout, re.MULTILINE)
    detail = json.loads(run_cli(["show", str(runs[0]["id"]), "--json"], home).stdout)
    assert [m["step"] for m in detail["metrics"]] == list(range(1, 9))
    assert run_cli(["show", "999"], home).returncode == 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_stops_and_saves_then_resume_continues(tmp_path, home, demo_assets, backend):
    needs_backend(backend)
    # 100 steps: Ctrl-C lands near step 10-20 (the store sees steps in batches of 10), so
    # there are steps left to stop before and to resume into; every step the resume
    # trains to the end is one the test waits for (400 took minutes on a loaded machine).
    config = write_config(tmp_path / "run.yaml", demo_assets, max_steps=CTRL_C_STEPS, max_seq_length=128,
                          backend=backend)
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160"}
    # Own process group, like a terminal: Ctrl-C reaches the CLI *and* its worker child.
    proc = subprocess.Popen(TUNELAB + ["train", str(config)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 120
    db = home / "tunelab.db"
    while time.time() < deadline:
        if db.exists() and _steps_logged(db) >= 3:
            break
        time.sleep(0.05)
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
    assert steps[0] == stopped_at + 1 and steps[-1] == CTRL_C_STEPS
    again = run_cli(["resume", str(run["id"])], home)
    assert again.returncode != 0 and "resumed" in (again.stderr + again.stdout)


def _steps_logged(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COALESCE(MAX(step), 0) FROM metrics").fetchone()[0]
    except sqlite3.Error:
        return 0


def run_cli_at(args, home: Path, columns: int):
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": str(columns)}
    return subprocess.run(TUNELAB + args, env=env, capture_output=True, text=True, timeout=60)


def _recorded_run(home: Path, **fields) -> int:
    """A finished row written straight into the home's database, as an older tunelab
    (or another tool) may have left it."""
    from tunelab.store import Store

    store = Store(home / "tunelab.db")
    run_id = store.create_run({"model_name": fields["model_name"]}, fields["model_name"], fields.get("dataset", "train.jsonl"))
    store.finalize_run(run_id, status=fields.get("status", "completed"), total_steps=400, final_step=400, final_loss=1.2345,
                       output_dir=fields.get("output_dir"), error_message=fields.get("error_message"), loss_sparkline=[3, 2, 1])
    if fields.get("modality"):
        store.set_modality(run_id, fields["modality"])
    if fields.get("display_name"):
        # Straight SQL: today's store refuses control characters in names, older rows may hold them.
        with sqlite3.connect(home / "tunelab.db") as conn:
            conn.execute("UPDATE runs SET display_name = ? WHERE id = ?", (fields["display_name"], run_id))
    return run_id


def test_runs_fits_80_columns_and_wide_shows_the_rest(home):
    long_model = "/home/someone/models/" + "very-long-model-folder-name-" * 3 + "final"
    _recorded_run(home, model_name=long_model, dataset="/data/" + "x" * 60 + ".jsonl")
    _recorded_run(home, model_name="org/model", display_name="a run with a rather long display name indeed",
                  modality="vision")
    narrow = run_cli_at(["runs"], home, 80)
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    row_lines = [line for line in lines if "completed" in line]
    assert len(row_lines) == 2  # one line per run, nothing wrapped
    for line in row_lines:
        assert "400/400" in line and "1.2345" in line and re.search(r"(\d{4}-)?\d\d-\d\d \d\d:\d\d", line)
    assert "vision" in row_lines[0] and "vision" not in row_lines[1]  # newest first; the other's is unknown
    assert "very-long-model" in narrow.stdout  # the model folder's own name stands in for a missing name
    wide = run_cli_at(["runs", "--wide"], home, 320)
    assert "org/model" in wide.stdout and "x" * 60 in wide.stdout and "▁" in wide.stdout


def test_show_and_runs_print_stored_control_characters_escaped(home):
    hostile = "org/m\x1b]0;pwned\x07\x1b[2J\u009b2J\u202eevil"
    run_id = _recorded_run(home, model_name=hostile, display_name="n\u202ex", output_dir="/tmp/out\nput",
                           status="error", error_message="boom\x1b[31m\nsecond line")
    for args in (["show", str(run_id)], ["runs"], ["runs", "--wide"]):
        result = run_cli_at(args, home, 200)
        assert result.returncode == 0, result.stderr
        for raw in ("\x1b", "\x07", "\u009b", "\u202e"):
            assert raw not in result.stdout, (args, raw)
    shown = run_cli_at(["show", str(run_id)], home, 200).stdout
    assert "\\x1b]0;pwned\\x07" in shown and "\\u202e" in shown and "/tmp/out\\nput" in shown
    assert "boom\\x1b[31m\nsecond line" in shown  # an error message keeps its own line breaks


def test_outcome_of_a_run_that_never_stepped_prints_no_none(home):
    import io

    from rich.console import Console

    from tunelab.cli.foreground import RunOutcome, print_outcome
    from tunelab.store import Store

    store = Store(home / "tunelab.db")
    run_id = store.create_run({"model_name": "m"}, "m", "d")
    store.finalize_run(run_id, status="error", error_message="the worker could not load the model")
    out = io.StringIO()
    print_outcome(RunOutcome(run_id, store.get_run(run_id), None, None, 0), Console(file=out, width=120))
    assert "None" not in out.getvalue()
    assert f"run {run_id}: error before the first training step" in out.getvalue()


def _no_runs_recorded(home: Path) -> bool:
    db = home / "tunelab.db"
    if not db.exists():
        return True
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


@pytest.mark.parametrize("case", ["missing file", "folder", "not json", "model without config", "hub offline"])
def test_what_can_be_checked_before_a_run_is_checked_before_a_row_exists(tmp_path, home, demo_assets, case):
    bare_model = tmp_path / "bare-model"
    bare_model.mkdir()
    (tmp_path / "notes.jsonl").write_text("just some words\n")
    overrides, field, words = {
        "missing file": ({"local_datasets": [str(tmp_path / "missing.jsonl")]}, "local_datasets", "does not exist"),
        "folder": ({"local_datasets": [str(tmp_path)]}, "local_datasets", "is a folder"),
        "not json": ({"local_datasets": [str(tmp_path / "notes.jsonl")]}, "local_datasets", "does not hold JSON"),
        "model without config": ({"model_name": str(bare_model)}, "model_name", "has no config.json"),
        "hub offline": ({"model_name": "nobody-here/not-cached-model"}, "model_name",
                        "not a local folder, and the hub cannot be reached (offline mode is on)"),
    }[case]
    config = write_config(tmp_path / "run.yaml", demo_assets, **overrides)
    # Offline and with an empty hub cache: the test never touches the network.
    env = {**os.environ, "TUNELAB_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(TUNELAB + ["train", str(config)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert field in result.stderr and words in " ".join(result.stderr.split()), result.stderr
    assert "None" not in result.stdout + result.stderr and "Traceback" not in result.stderr
    assert _no_runs_recorded(home)


def test_every_config_error_is_listed_at_once(tmp_path, home, demo_assets):
    config = write_config(tmp_path / "run.yaml", demo_assets, learning_rate=3, batch_size=10**9, lora_rnk=8)
    result = run_cli(["train", str(config)], home)
    assert result.returncode == 2, result.stderr
    for field in ("learning_rate", "batch_size", "lora_rnk"):
        assert f"config error {field}:" in result.stderr, result.stderr
