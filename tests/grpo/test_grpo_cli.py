"""The CLI's side of GRPO, as a user runs it: `tunelab fields` documents the objective, its
rewards and generation settings, and `tunelab serve --help` names the reward-code opt-in."""

from __future__ import annotations

import os
import subprocess
import sys

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]


def _run(args, home):
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "400"}
    return subprocess.run(TUNELAB + args, env=env, capture_output=True, text=True, timeout=120)


def test_fields_document_grpo_and_its_settings(home):
    result = _run(["fields"], home)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "kto | grpo" in text and "prompt_only" in text
    for words in ("exact_match | contains", "--allow-reward-code", "completions sampled per prompt", "Empty: 64.", "0 for grpo"):
        assert words in text, words
    for field in ("rewards", "num_generations", "max_completion_length", "temperature"):
        assert f"│ {field} " in result.stdout, field
    serve = _run(["serve", "--help"], home)
    assert "--allow-reward-code" in serve.stdout
