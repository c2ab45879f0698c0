"""Loading data: several local files, slices, the eval-set choice, and S3 through a real
S3-compatible server on a loopback port (moto's standalone server)."""

from __future__ import annotations

import json
from collections import Counter
import socket
import shutil

import pytest

from typed_config import typed
from tunelab.worker.data.prepare import DataFormatError, load_raw


def _config(*files, **extra) -> dict:
    return {"local_datasets": [str(f) for f in files], "eval_steps": 0, "format": "auto", "seed": 3, **extra}


def _instructions(dataset) -> list[str]:
    return [row["instruction"] + row["input"] for row in dataset]


def test_files_of_different_types_are_joined(demo_assets, data_cache):
    raw = load_raw(typed(_config(demo_assets.alpaca_csv, demo_assets.alpaca_parquet)), data_cache)
    assert raw.format == "alpaca" and len(raw.train) == 120


def test_files_with_different_columns_are_refused(demo_assets, data_cache):
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_config(demo_assets.alpaca, demo_assets.text)), data_cache)
    assert err.value.field == "local_datasets" and "columns" in str(err.value)


def test_missing_and_unsupported_files_are_named(tmp_path, data_cache):
    with pytest.raises(DataFormatError, match="does not exist"):
        load_raw(typed(_config(tmp_path / "absent.jsonl")), data_cache)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DataFormatError, match="unsupported file type"):
        load_raw(typed(_config(tmp_path / "notes.txt")), data_cache)


def test_slice_selects_rows(demo_assets, data_cache):
    whole = load_raw(typed(_config(demo_assets.alpaca)), data_cache)
    part = load_raw(typed(_config(demo_assets.alpaca, slice_start=10, slice_end=30)), data_cache)
    assert _instructions(part.train) == _instructions(whole.train)[10:30]
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_config(demo_assets.alpaca, slice_start=5000)), data_cache)
    assert err.value.field == "slice_start"


def test_no_eval_set_without_eval_steps(demo_assets, data_cache):
    assert load_raw(typed(_config(demo_assets.alpaca, eval_holdout=0.2)), data_cache).eval is None


def test_holdout_share_is_split_off_the_training_rows(demo_assets, data_cache):
    whole = load_raw(typed(_config(demo_assets.alpaca)), data_cache)
    raw = load_raw(typed(_config(demo_assets.alpaca, eval_steps=5, eval_holdout=0.25)), data_cache)
    assert (len(raw.train), len(raw.eval)) == (240, 80)
    # Every row lands on exactly one side.
    assert Counter(_instructions(raw.train)) + Counter(_instructions(raw.eval)) == Counter(_instructions(whole.train))
    default = load_raw(typed(_config(demo_assets.alpaca, eval_steps=5)), data_cache)
    assert len(default.eval) == 16  # 5% of 320 when no share is given


def test_local_eval_files_are_used_as_given(demo_assets, data_cache):
    raw = load_raw(typed(_config(demo_assets.alpaca, eval_steps=5, local_eval_datasets=[str(demo_assets.alpaca_csv)])), data_cache)
    assert len(raw.train) == 320 and len(raw.eval) == 60


def test_eval_split_must_exist(demo_assets, data_cache):
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_config(demo_assets.alpaca, eval_steps=5, eval_split="validation")), data_cache)
    assert err.value.field == "eval_split" and "local_eval_datasets" in str(err.value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """A real S3-compatible HTTP server on loopback, with a bucket of demo files."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def _s3_config(endpoint: str, prefix: str, **extra) -> dict:
    s3 = {"bucket": "tunelab-data", "prefix": prefix, "region": "us-east-1", "endpoint_url": endpoint,
          "access_key_id": "testing", "secret_access_key": "testing", "session_token": None}
    return {"s3": s3, "eval_steps": 0, "format": "auto", "seed": 3, **extra}


def test_s3_prefix_is_downloaded_with_its_splits(s3_server, demo_assets, tmp_path, data_cache):
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="tunelab-data")
    rows = demo_assets.alpaca.read_text().splitlines()
    client.put_object(Bucket="tunelab-data", Key="sets/qa/train.jsonl", Body="\n".join(rows[:50]).encode())
    client.put_object(Bucket="tunelab-data", Key="sets/qa/validation.jsonl", Body="\n".join(rows[50:60]).encode())
    client.put_object(Bucket="tunelab-data", Key="sets/qa/README.md", Body=b"not data")

    raw = load_raw(typed(_s3_config(s3_server, "sets/qa/", eval_steps=5)), data_cache)
    assert raw.format == "alpaca" and len(raw.train) == 50
    assert len(raw.eval) == 10  # the conventional "validation" split was found
    assert raw.eval[0]["instruction"] == json.loads(rows[50])["instruction"]

    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_s3_config(s3_server, "nothing-here/")), data_cache)
    assert err.value.field == "s3" and "no data files" in str(err.value)


def test_s3_bad_credentials_or_bucket_is_an_s3_error(s3_server, data_cache):
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_s3_config(s3_server, "x/") | {"s3": {**_s3_config(s3_server, "x/")["s3"], "bucket": "no-such-bucket"}}), data_cache)
    assert err.value.field == "s3" and "no-such-bucket" in str(err.value)


def test_two_sources_are_refused(demo_assets, data_cache):
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_config(demo_assets.alpaca, dataset="org/name")), data_cache)
    assert "exactly one" in str(err.value)


def test_unreachable_hub_dataset_is_a_dataset_error(tmp_path, monkeypatch, data_cache):
    # No hub is reachable from tests; the real loading code must fail with a clear field.
    import datasets
    import huggingface_hub

    # Offline mode fails at once instead of waiting for network timeouts; the libraries
    # read it at import, so the flags are set where they keep it.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataFormatError) as err:
        load_raw(typed({"dataset": "tunelab-test/not-a-dataset", "eval_steps": 0}), data_cache)
    assert err.value.field == "dataset" and "tunelab-test/not-a-dataset" in str(err.value)


def test_hub_loader_reads_a_dataset_folder_with_splits(demo_assets, tmp_path, data_cache):
    # `dataset` goes through datasets.load_dataset, which also takes a folder of files.
    folder = tmp_path / "local-hub"
    folder.mkdir()
    shutil.copy(demo_assets.alpaca, folder / "train.jsonl")
    (folder / "test.jsonl").write_text("".join(demo_assets.alpaca.read_text().splitlines(True)[:7]))
    raw = load_raw(typed({"dataset": str(folder), "eval_steps": 3, "format": "auto", "seed": 1}), data_cache)
    assert len(raw.train) == 320 and len(raw.eval) == 7


def test_streaming_reads_only_the_slice(demo_assets, tmp_path, data_cache):
    folder = tmp_path / "streamed"
    folder.mkdir()
    shutil.copy(demo_assets.alpaca, folder / "train.jsonl")
    shutil.copy(demo_assets.alpaca, folder / "validation.jsonl")
    whole = load_raw(typed(_config(demo_assets.alpaca)), data_cache)
    raw = load_raw(typed({"dataset": str(folder), "streaming": True, "slice_start": 5, "slice_end": 25,
                    "eval_steps": 2, "format": "auto", "seed": 1}), data_cache)
    assert _instructions(raw.train) == _instructions(whole.train)[5:25]
    assert len(raw.eval) == 320  # all of the (small) streamed validation split
    with pytest.raises(DataFormatError) as err:
        load_raw(typed({"dataset": str(folder), "streaming": True, "eval_steps": 0}), data_cache)
    assert err.value.field == "slice_end"
    with pytest.raises(DataFormatError) as err:
        load_raw(typed(_config(demo_assets.alpaca, streaming=True)), data_cache)
    assert err.value.field == "streaming"
