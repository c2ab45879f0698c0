"""`tunelab chat` as a user runs it: a real subprocess, prompts piped into stdin, answers
read from stdout — compared token for token with greedy answers computed here."""

from __future__ import annotations

import pytest

from inference_helpers import run_cli
from tunelab import paths
from tunelab.store import Store
from tunelab.text import printable

pytestmark = pytest.mark.slow

SYSTEM = "You answer briefly."
FIRST, SECOND = "What is the capital of France?", "Name a colour."


def test_compare_answers_each_message_with_the_base_then_the_fine_tune(trained, reference):
    tokens = 8
    stdin = f"{FIRST}\n\n{SECOND}\n/reset\n{SECOND}\n"
    done = run_cli(["chat", trained.run_id, "--compare", "--temperature", "0", "--max-new-tokens", tokens,
                    "--system", SYSTEM], trained.home, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr

    def answers(adapter: bool) -> list[str]:
        start = [{"role": "system", "content": SYSTEM}]
        first = reference.chat([*start, {"role": "user", "content": FIRST}], tokens, adapter)
        follow_up = [*start, {"role": "user", "content": FIRST}, {"role": "assistant", "content": first},
                     {"role": "user", "content": SECOND}]
        # Each side keeps its own conversation; /reset starts both over from the system prompt.
        return [first, reference.chat(follow_up, tokens, adapter), reference.chat([*start, {"role": "user", "content": SECOND}], tokens, adapter)]

    base, tuned = answers(False), answers(True)
    assert base != tuned  # the adapter changed what the model says
    expected = "".join(f"[base]\n{printable(b, keep_lines=True)}\n[fine-tune]\n{printable(t, keep_lines=True)}\n"
                       for b, t in zip(base, tuned))
    assert done.stdout == expected


def test_unknown_run_and_bad_checkpoint_say_what_to_do(trained):
    missing = run_cli(["chat", 999], trained.home, stdin="")
    assert missing.returncode == 1
    assert "there is no run 999" in missing.stderr and "tunelab runs" in missing.stderr
    bad = run_cli(["chat", trained.run_id, "--checkpoint", 3], trained.home, stdin="")
    assert bad.returncode == 2
    assert "--checkpoint" in bad.stderr and "valid checkpoints" in bad.stderr and "2, 4" in bad.stderr
    hot = run_cli(["chat", trained.run_id, "--temperature", "2.5"], trained.home, stdin="")
    assert hot.returncode == 2 and "--temperature" in hot.stderr
    for done in (missing, bad, hot):
        assert "Traceback" not in done.stderr and done.stdout == ""


def test_runs_without_weights_are_refused_with_the_reason(home, tmp_path):
    with Store(paths.db_path()) as store:
        failed = store.create_run({"model_name": "m"}, "m", "d")
        store.finalize_run(failed, status="error", error_message="out of memory", output_dir=str(tmp_path))
        cancelled = store.create_run({"model_name": "m"}, "m", "d")
        store.mark_cancel_requested(cancelled)
        store.finalize_run(cancelled, status="stopped", output_dir=None)
    answers = {run: run_cli(["chat", run], home, stdin="") for run in (failed, cancelled)}
    assert "ended in error (out of memory)" in answers[failed].stderr
    assert "no valid checkpoint" in answers[failed].stderr
    assert "was cancelled" in answers[cancelled].stderr
    for done in answers.values():
        assert done.returncode == 1 and "Traceback" not in done.stderr
