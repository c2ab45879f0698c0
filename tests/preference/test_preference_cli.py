"""The CLI's side of the preference objectives, as a user runs it: `tunelab fields` documents
`objective` and `beta`, and `tunelab demo --method` refuses what is no demo, naming the option."""

from __future__ import annotations

import os
import subprocess
import sys

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]


def _run(args, home):
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(TUNELAB + args, env=env, capture_output=True, text=True, timeout=120)


def test_fields_document_the_objective_and_beta(home):
    result = _run(["fields"], home)
    assert result.returncode == 0, result.stderr
    assert "objective" in result.stdout and "sft | dpo | orpo | simpo | kto" in result.stdout
    assert "beta" in result.stdout and "2.0 for simpo" in result.stdout


def test_demo_refuses_an_unknown_method_and_a_preference_method_off_the_text_model(home):
    unknown = _run(["demo", "--method", "ppo"], home)
    assert unknown.returncode == 2 and "--method" in unknown.stderr and "dpo" in unknown.stderr
    vision = _run(["demo", "--method", "dpo", "--modality", "vision"], home)
    assert vision.returncode == 2 and "text model" in vision.stderr
