"""Fixtures for the GRPO tests: the demo's colour prompts (strings and chat messages) and a
user reward file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.demos.grpo import write_prompt_data

# A user's reward: 0.25 for each completion whose row carried a reference answer, so the
# run's rewards/<name>/mean shows that the file ran, in the worker, with the row's columns.
REWARD_FILE = '''
def has_reference(prompts, completions, reference=None, **kwargs):
    return [0.25 if ref else 0.0 for ref in reference]
'''


@pytest.fixture(scope="session")
def prompt_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_prompt_data(tmp_path_factory.mktemp("grpo") / "prompts.jsonl", n=32)


@pytest.fixture(scope="session")
def prompt_messages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_prompt_data(tmp_path_factory.mktemp("grpo") / "messages.jsonl", n=8, conversational=True)


@pytest.fixture(scope="session")
def reward_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("grpo") / "my_rewards.py"
    path.write_text(REWARD_FILE)
    return path
