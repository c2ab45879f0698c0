"""What a Ray run checks before any cluster is contacted: `tunelab train --ray ADDRESS`
sets ray_address (seen through a setting that conflicts with it), and without Ray
installed a start is refused naming ray_address and `pip install 'tunelab[cluster]'`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tunelab.config.run_config import ConfigError
from tunelab.demos.text import demo_config
from tunelab.orchestrator.prechecks import check_before_start


def test_the_ray_flag_sets_ray_address(tmp_path, home, demo_assets):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**demo_config(demo_assets, steps=2).public(), "gpu_ids": [0]}))
    result = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "train", str(config), "--local", "--ray", "127.0.0.1:6379"],
                            env={**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200"}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu_ids" in result.stderr and "Ray picks the GPUs" in result.stderr


def test_a_missing_ray_is_refused_at_start_naming_the_setting_and_the_fix(demo_assets, monkeypatch):
    cfg = demo_config(demo_assets, steps=2).model_copy(update={"ray_address": "127.0.0.1:6379"})
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import ray fails, find_spec finds nothing
    with pytest.raises(ConfigError) as refused:
        check_before_start(cfg)
    (error,) = refused.value.errors
    assert error.field == "ray_address" and "pip install 'tunelab[cluster]'" in error.message
    check_before_start(demo_config(demo_assets, steps=2))  # a run without ray_address does not need Ray
