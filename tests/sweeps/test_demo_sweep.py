"""`tunelab demo --sweep-file FILE` writes the demo's sweep with this home's demo model and
data in it: a file `tunelab sweep` accepts as it is (checked here with the sweep's own
loader, every corner of its space included), and trains nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_helpers import TUNELAB, sweep_env  # noqa: E402
from tunelab.store import Store  # noqa: E402
from tunelab.sweeps.spec import load_sweep  # noqa: E402


def test_the_demo_sweep_file_is_written_ready_to_run(tmp_path, home):
    path = tmp_path / "sweeps" / "demo.yaml"
    result = subprocess.run(TUNELAB + ["demo", "--sweep-file", str(path)], env=sweep_env(home, 0), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tunelab sweep {path}" in result.stdout
    spec = load_sweep(path)
    assert (spec.trials, spec.pruner, set(spec.space)) == (8, "median", {"learning_rate", "lora_r"})
    assert spec.objective.metric == "eval_loss" and spec.base["eval_holdout"] > 0 and spec.base["eval_steps"] > 0
    assert Path(spec.base["model_name"]).is_relative_to(home) and Path(spec.base["local_datasets"][0]).is_file()
    assert Store().list_runs() == []
