"""A worker started from a script does not run that script again, unless its target is in it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tunelab.orchestrator.bare_main import main_not_rerun

SCRIPT = """
import sys
with open(sys.argv[1], "a") as log:
    log.write(__name__ + "\\n")


def work(payload, events, stops):
    pass


if __name__ == "__main__":
    import multiprocessing

    from tunelab.orchestrator.child import spawn_worker

    handle = spawn_worker(multiprocessing.get_context("spawn"), sys.argv[2], {}, {}, "bare-main-test")
    handle.process.join(120)
    sys.exit(handle.process.exitcode)
"""


@pytest.mark.parametrize(("target", "runs"), [
    ("builtins:print", ["__main__"]),  # a module's function: the script is not run again
    ("__main__:work", ["__main__", "__mp_main__"]),  # the script's own function: it must be
])
def test_the_script_runs_again_in_the_child_only_for_its_own_target(tmp_path, target, runs):
    script, log = tmp_path / "script", tmp_path / "log.txt"  # no .py, like a console script
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(log), target], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == runs


def test_the_main_module_is_left_as_it_was():
    main = sys.modules["__main__"]
    before = main.__dict__.get("__spec__", "missing")
    with main_not_rerun("tunelab.worker.entry:run_worker"):
        assert main.__spec__.name == "__main__"
    assert main.__dict__.get("__spec__", "missing") is before
