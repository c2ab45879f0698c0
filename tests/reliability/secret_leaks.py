"""Looking for secrets everywhere a run leaves text: the database files (with -wal and
-shm), the server's logs, every API response (the progress stream included), the stored
config, the loss plot and the run's output folder. Shared by the suite and the bench."""

from __future__ import annotations

import contextlib
import json
import secrets as random_tokens
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import httpx

from harness import start_run, wait_run_ended, watch_next_run


def make_secrets() -> dict[str, str]:
    """Distinctive values for every secret a run can carry."""
    tag = random_tokens.token_hex(6)
    return {
        "hf_token": f"hf_SECRETHF{tag}",
        "wandb_token": f"WANDBSECRET{tag}",
        "access_key_id": f"AKIASECRET{tag.upper()}",
        "secret_access_key": f"S3SECRETKEY{tag}",
        "session_token": f"S3SESSION{tag}",
    }


def with_secrets(body: dict[str, Any], values: dict[str, str], s3: dict[str, Any]) -> dict[str, Any]:
    s3_keys = {k: values[k] for k in ("access_key_id", "secret_access_key", "session_token")}
    return {**body, "hf_token": values["hf_token"], "wandb_token": values["wandb_token"], "s3": {**s3, **s3_keys}}


class RecordingClient(httpx.Client):
    """An API client that keeps the body of every response it receives."""

    def __init__(self, server: Any):
        self.bodies: list[bytes] = []
        super().__init__(base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"}, timeout=60,
                         event_hooks={"response": [self._keep]})

    def _keep(self, response: httpx.Response) -> None:
        response.read()
        self.bodies.append(response.content)


def _files(*patterns: tuple[Path, str]) -> list[Path]:
    return sorted({p for folder, pattern in patterns if folder.exists() for p in folder.glob(pattern) if p.is_file()})


def find_leaks(values: dict[str, str], home: Path, responses: list[bytes], stream_events: list[Any],
               plots: list[bytes], stored_config: dict[str, Any], output_dir: str | None) -> dict[str, list[str]]:
    """For each place looked at, the names of the secrets found there (empty lists: clean)."""
    places: dict[str, list[bytes]] = {
        "database files": [p.read_bytes() for p in _files((home, "tunelab.db*"))],
        "server log": [p.read_bytes() for p in _files((home / "logs", "*"), (home, "server-stderr.log"))],
        "API responses": responses,
        "progress stream": [json.dumps(event.data).encode() for event in stream_events],
        "stored config": [json.dumps(stored_config).encode()],
        "plot PNG": plots,
        "output folder": [p.read_bytes() for p in _files((Path(output_dir), "**/*"))] if output_dir else [],
    }
    found: dict[str, list[str]] = {}
    for place, blobs in places.items():
        found[place] = sorted(name for name, secret in values.items()
                              if any(secret.encode() in blob for blob in blobs))
    return found


S3_BUCKET, S3_PREFIX = "tunelab-secrets", "sets/"


@contextlib.contextmanager
def s3_bucket_with(data_file: Path) -> Iterator[dict[str, Any]]:
    """moto's S3 server on loopback holding `data_file`; yields the run's `s3` settings
    (without keys: moto accepts any, so a run signs its requests with its own secret keys)."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                              aws_secret_access_key="setup")
        client.create_bucket(Bucket=S3_BUCKET)
        client.upload_file(str(data_file), S3_BUCKET, S3_PREFIX + "train.jsonl")
        yield {"bucket": S3_BUCKET, "prefix": S3_PREFIX, "region": "us-east-1", "endpoint_url": endpoint}
    finally:
        server.stop()


def _read_everything(client: RecordingClient, job: int) -> list[bytes]:
    """Read the run through every route a client could use; return the two plots."""
    for path in ("/api/train/status", "/api/train/metrics", "/api/runs", f"/api/runs/{job}"):
        assert client.get(path).status_code == 200
    client.get("/api/health", params={"detail": 1})
    return [client.get("/api/train/plot.png", params={"theme": theme}).content for theme in ("light", "dark")]


def run_with_secrets(server: Any, body: dict[str, Any],
                     values: dict[str, str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Run `body` on `server`, read it back every way while it runs and after, send one
    refused start with the same secrets, stop the server; (the run, what leaked where)."""
    client = RecordingClient(server)
    stream = watch_next_run(server)
    job = start_run(client, body)
    while client.get(f"/api/runs/{job}").json()["status"] == "running":  # poll like a page would
        _read_everything(client, job)
        time.sleep(0.2)
    stream.join()
    row = wait_run_ended(client, job)
    plots = _read_everything(client, job)
    refused = client.post("/api/train/start", json={**body, "learning_rate": 5})
    assert refused.status_code == 422, refused.text
    events = [event for _, event in stream.events]
    server.stop()  # the database is looked at after its write-ahead log was folded in, too
    return row, find_leaks(values, server.home, client.bodies, events, plots, row["config"], row["output_dir"])
