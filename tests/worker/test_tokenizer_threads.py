"""The fast tokenizer's thread pool: on for the tokenizing call only, and never against the user's choice."""

from __future__ import annotations

import os

import pytest

from tunelab.worker.data import tokenizer_threads


@pytest.fixture
def worker_environment(monkeypatch):
    """The variable as the worker leaves it (entry.QUIET_ENVIRONMENT), module state restored after."""
    monkeypatch.setattr(tokenizer_threads, "_user_choice", None)
    return monkeypatch


def test_the_pool_is_on_inside_and_back_off_after(worker_environment):
    worker_environment.delenv(tokenizer_threads.VARIABLE, raising=False)
    tokenizer_threads.remember_user_choice()
    worker_environment.setenv(tokenizer_threads.VARIABLE, "false")  # the worker's own default
    with tokenizer_threads.all_cores():
        assert os.environ[tokenizer_threads.VARIABLE] == "true"
    assert os.environ[tokenizer_threads.VARIABLE] == "false"


def test_it_is_back_off_after_an_error_too(worker_environment):
    worker_environment.setenv(tokenizer_threads.VARIABLE, "false")
    with pytest.raises(ValueError):
        with tokenizer_threads.all_cores():
            raise ValueError("bad row")
    assert os.environ[tokenizer_threads.VARIABLE] == "false"


def test_a_user_who_turned_it_off_keeps_it_off(worker_environment):
    worker_environment.setenv(tokenizer_threads.VARIABLE, "false")
    tokenizer_threads.remember_user_choice()
    with tokenizer_threads.all_cores():
        assert os.environ[tokenizer_threads.VARIABLE] == "false"
