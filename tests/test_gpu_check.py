"""bench/gpu_check.py --dry-run: the GPU check's own code, on the CPU with the demo model
(real orchestrator, worker, stop-and-save, resume and export), passes and says which
items need CUDA."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.py"


def test_dry_run_passes_and_skips_what_needs_cuda(tmp_path, demo_assets):
    report = tmp_path / "check.json"
    # The session's demo assets (built by the same ensure_demo_assets), copied to where the
    # dry run looks for them: it finds them READY instead of training a tokenizer and
    # building the model a second time, ~8 s of CPU that prove nothing the fixture has not.
    shutil.copytree(demo_assets.root, tmp_path / "home" / "demo-assets")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--home", str(tmp_path / "home"), "--json", str(report)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all items passed" in done.stdout
    items = {row["item"]: row for row in json.loads(report.read_text())["items"]}
    assert items["qlora"]["result"] == "skip" and items["qlora"]["detail"] == "skipped: needs CUDA"
    for name in ("lora", "stop-and-save, resume", "export merged"):
        assert items[name]["result"] == "pass", items[name]
    assert items["lora"]["peak_allocated_gb"] > 0
    assert "resumed at" in items["stop-and-save, resume"]["detail"]
