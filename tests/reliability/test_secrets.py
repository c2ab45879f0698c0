"""A run carrying every kind of secret — hf_token, wandb_token and S3 keys — leaves none of
them in the database files, the server log (at debug level), any API response, the
stored config, the plot or the run's files: once for a real run that reads its data
from a real S3-compatible server with those keys, and once for a worker that echoes
the secrets in its messages, malformed events and error."""

from __future__ import annotations

import pytest

from harness import worker_env
from secret_leaks import S3_BUCKET, make_secrets, run_with_secrets, s3_bucket_with, with_secrets


@pytest.fixture(scope="module")
def s3_source(demo_assets):
    pytest.importorskip("moto.server")
    with s3_bucket_with(demo_assets.alpaca) as source:
        yield source


@pytest.mark.slow
def test_a_real_run_with_every_secret_leaks_none(start_server, demo_run, s3_source):
    values = make_secrets()
    server = start_server(log_level="debug")
    body = with_secrets(demo_run(max_steps=3, local_datasets=[]), values, s3_source)
    row, leaks = run_with_secrets(server, body, values)
    assert row["status"] == "completed", row["error_message"]  # the S3 data was read with the keys
    assert row["dataset_name"].startswith(f"s3://{S3_BUCKET}/")
    assert leaks == {place: [] for place in leaks}
    assert set(values) & set(row["config"]) == set() and set(values) & set(row["config"]["s3"]) == set()


def test_secrets_a_worker_echoes_are_scrubbed_everywhere(start_server, demo_run):
    values = make_secrets()
    server = start_server(extra_env=worker_env("fault_workers:echoes_secrets"), log_level="debug")
    unreachable = {"bucket": "b", "prefix": "", "region": "us-east-1", "endpoint_url": "http://127.0.0.1:9"}
    body = with_secrets(demo_run(max_steps=3, local_datasets=[]), values, unreachable)
    row, leaks = run_with_secrets(server, body, values)
    assert row["status"] == "error" and row["error_message"].startswith("401 Unauthorized for token ***")
    assert leaks == {place: [] for place in leaks}
