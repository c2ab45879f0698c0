"""The checks a start makes in the parent before a run exists: real files, a real hub
cache folder, and a hub endpoint that cannot answer — never the network."""

from __future__ import annotations

import json
import time

import pytest

from tunelab.config.run_config import ConfigError, parse_config
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.prechecks import check_before_start, data_file_problem, model_problem

UNREACHABLE_HUB = "http://127.0.0.1:9"  # the discard port: nothing listens, the connect is refused at once


def use_hub_cache(monkeypatch, folder) -> None:
    # huggingface_hub reads HF_HUB_CACHE once, at import; a process started with it set sees the same.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(folder))


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    use_hub_cache(monkeypatch, tmp_path / "hub-cache")


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("rows.parquet", b"not parquet at all", "not a Parquet file"),
        ("rows.jsonl", b"", "is empty"),
        ("rows.json", b"instruction,output\n", "does not hold JSON"),
        ("rows.txt", b"hello", "not a data file"),
    ],
)
def test_data_files_that_cannot_be_read_as_their_type_are_named(tmp_path, name, content, words):
    (tmp_path / name).write_bytes(content)
    assert words in data_file_problem(str(tmp_path / name))


def test_readable_data_files_pass(demo_assets):
    for path in (demo_assets.alpaca, demo_assets.sharegpt, demo_assets.chatml, demo_assets.text):
        assert data_file_problem(str(path)) is None


def test_a_hub_model_in_the_local_cache_passes_offline(offline, tmp_path):
    snapshot = tmp_path / "hub-cache" / "models--org--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "hub-cache" / "models--org--cached" / "refs").mkdir()
    (tmp_path / "hub-cache" / "models--org--cached" / "refs" / "main").write_text("abc123")
    assert model_problem("org/cached") is None
    assert "offline mode is on" in model_problem("org/not-cached")


def test_an_unreachable_hub_reads_no_network(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    use_hub_cache(monkeypatch, tmp_path / "hub-cache")
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE_HUB)
    started = time.monotonic()
    problem = model_problem("org/somewhere")
    assert problem == ("not a local folder, and the hub cannot be reached (no network); give a local model folder, "
                       "or download the model once while online")
    assert time.monotonic() - started < 30  # bounded by the probe's own timeout, never a hang


def test_every_problem_is_reported_at_once(offline, tmp_path):
    cfg = parse_config({"model_name": str(tmp_path), "local_datasets": [str(tmp_path / "a.jsonl")],
                        "local_eval_datasets": [str(tmp_path)]})
    with pytest.raises(ConfigError) as info:
        check_before_start(cfg)
    assert {e.field for e in info.value.errors} == {"model_name", "local_datasets", "local_eval_datasets"}


def test_a_start_with_the_real_worker_refuses_before_any_row(store, offline, demo_assets):
    orchestrator = Orchestrator(store)
    try:
        with pytest.raises(ConfigError, match="offline mode is on"):
            orchestrator.start(parse_config({"model_name": "org/not-cached", "local_datasets": [str(demo_assets.alpaca)]}))
        assert store.count_runs() == 0
    finally:
        orchestrator.shutdown()
