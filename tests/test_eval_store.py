"""The run_evals table (store migration 5): results stored per run, newest first, gone
with their run; an unknown run or kind is refused. On SQLite and PostgreSQL (store_url)."""

from __future__ import annotations

import pytest

from tunelab.store.evals import add_eval, list_evals
from tunelab.store import RunNotFound, Store


def _finished_run(store: Store) -> int:
    run_id = store.create_run({"model_name": "m"}, "m", "d")
    store.finalize_run(run_id, status="completed")
    return run_id


def test_results_are_stored_per_run_newest_first_and_go_with_their_run(store_url):
    with Store(store_url) as store:
        first, second = _finished_run(store), _finished_run(store)
        add_eval(store, first, "perplexity", {"base": {"loss": 2.0}, "fine_tune": {"loss": 1.5}}, created_at=10.0)
        newest = add_eval(store, first, "generations", {"items": [{"base": {"text": "é\n"}}]}, created_at=11.0)
        add_eval(store, second, "lm_eval", {"scores": {"t": {"acc": 0.5}}})
        listed = list_evals(store, first)
        assert [r["kind"] for r in listed] == ["generations", "perplexity"]
        assert listed[0] == newest and listed[0]["payload"]["items"][0]["base"]["text"] == "é\n"
        assert listed[1]["created_at"] == 10.0 and listed[1]["payload"]["fine_tune"]["loss"] == 1.5
        store.delete_run(first)
        with pytest.raises(RunNotFound):
            list_evals(store, first)
        assert [r["kind"] for r in list_evals(store, second)] == ["lm_eval"]


def test_an_unknown_run_kind_or_number_is_refused(store_url):
    with Store(store_url) as store:
        run_id = _finished_run(store)
        with pytest.raises(RunNotFound):
            add_eval(store, run_id + 1, "perplexity", {})
        with pytest.raises(ValueError, match="unknown eval kind"):
            add_eval(store, run_id, "accuracy", {})
        with pytest.raises(ValueError):
            add_eval(store, run_id, "perplexity", {"loss": float("nan")})  # JSON has no NaN
        assert list_evals(store, run_id) == []
