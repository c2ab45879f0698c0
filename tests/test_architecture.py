"""The architecture contracts in pyproject.toml ([tool.importlinter]), checked by `lint-imports`:
the layers (surfaces over services over settings and storage over the shared contracts),
the server process importing no worker module and no torch, transformers or mlx, and no
import cycle between the modules or folders of any package.

The first test runs `lint-imports` on this checkout; the second shows that the contracts
bite, on a copy of the package with one fault of each kind put in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    # The checkout at `root` first on the path, whichever tunelab the environment has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_its_architecture_contracts():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


def test_the_contracts_catch_a_server_import_a_layer_import_and_a_cycle(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "tunelab", tmp_path / "tunelab",
                    ignore=shutil.ignore_patterns("__pycache__", "static", "docs_assets"))
    package = tmp_path / "tunelab"
    (package / "server" / "fault_worker.py").write_text("from tunelab.worker import context\n")
    (package / "config" / "fault_upward.py").write_text("from tunelab import orchestrator\n")
    (package / "store" / "fault_one.py").write_text("from tunelab.store import fault_two\n")
    (package / "store" / "fault_two.py").write_text("from tunelab.store import fault_one\n")

    result = _lint_imports(tmp_path)

    shown = result.stdout + result.stderr
    assert result.returncode == 1, shown
    assert "0 kept, 3 broken" in shown, shown
    assert "tunelab.server.fault_worker -> tunelab.worker.context" in shown
    assert "tunelab.config.fault_upward -> tunelab.orchestrator" in shown
    assert "No cycles are allowed in tunelab.store" in shown
