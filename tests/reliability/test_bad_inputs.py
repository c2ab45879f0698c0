"""The bad-input table: over-long names and paths, non-finite numbers, oversized counts
and control characters, each sent to a live server's start and dataset-preview routes.
Every row must be refused with a 4xx naming the field, start no run, and leave the
server's memory where it was.

Bodies are sent as raw JSON text, so NaN and Infinity reach the server as the bare
literals Python's JSON parser accepts. The server runs a fake worker that finishes at
once: a row that slipped through would show as a run in the history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psutil

from harness import worker_env

NAN, INF = float("nan"), float("inf")
START, PREVIEW, BOTH = ("start",), ("preview",), ("start", "preview")
# Growth of the server's resident memory over the whole table that still counts as flat.
RSS_GROWTH_LIMIT_MB = 64

# (family, field, value, routes)
TABLE: list[tuple[str, str, Any, tuple[str, ...]]] = [
    # over-long names and paths
    ("long name", "output_dir", "x" * 300, START),
    ("long name", "output_dir", "/".join(["deep"] * 1100), START),
    ("long name", "model_name", "m" * 256, BOTH),
    ("long name", "resume_from", "/tmp/" + "r" * 300, START),
    ("long name", "local_datasets", ["d" * 300 + ".jsonl"], BOTH),
    ("long name", "local_eval_datasets", ["e" * 300 + ".jsonl"], START),
    ("long name", "dataset", "org/" + "d" * 300, BOTH),
    ("long name", "subset", "s" * 300, BOTH),
    ("long name", "train_split", "t" * 300, BOTH),
    ("long name", "eval_split", "v" * 300, START),
    ("long name", "display_name", "n" * 300, START),
    ("long name", "tensorboard_dir", "b" * 300, START),
    ("long name", "wandb_project", "w" * 300, START),
    ("long name", "mlflow_experiment", "x" * 300, START),
    ("long name", "target_modules", ["q" * 300], START),
    ("long name", "column_mapping", {"instruction": "c" * 300}, BOTH),
    ("long name", "role_mapping", {"r" * 300: "user"}, BOTH),
    # non-finite numbers
    ("non-finite", "lora_alpha", INF, START),
    ("non-finite", "max_grad_norm", NAN, START),
    ("non-finite", "max_grad_value", INF, START),
    ("non-finite", "max_grad_leaf_norm", NAN, START),
    ("non-finite", "learning_rate", -INF, START),
    ("non-finite", "num_epochs", NAN, START),
    ("non-finite", "eval_steps", INF, START),
    ("non-finite", "weight_decay", NAN, START),
    ("non-finite", "warmup_ratio", NAN, START),
    ("non-finite", "eval_holdout", INF, START),
    ("non-finite", "slice_end", NAN, BOTH),
    ("non-finite", "rows", INF, PREVIEW),
    # oversized counts
    ("oversized", "batch_size", 1_000_000_000, START),
    ("oversized", "gradient_accumulation_steps", 10**9, START),
    ("oversized", "num_epochs", 1e12, START),
    ("oversized", "max_steps", 10**15, START),
    ("oversized", "save_steps", 10**15, START),
    ("oversized", "eval_steps", 1e15, START),
    ("oversized", "logging_steps", 10**15, START),
    ("oversized", "warmup_steps", 10**15, START),
    ("oversized", "save_total_limit", 10**12, START),
    ("oversized", "seed", 2**32, START),
    ("oversized", "seed", -1, START),
    ("oversized", "lora_r", 10**6, START),
    ("oversized", "max_seq_length", 10**9, START),
    ("oversized", "slice_start", 10**15, BOTH),
    ("oversized", "slice_end", 10**15, BOTH),
    ("oversized", "rows", 10**6, PREVIEW),
    # control and bidi-override characters
    ("control chars", "model_name", "org/m\x1b]0;pwned\x07", BOTH),
    ("control chars", "display_name", "run\u009b2J", START),
    ("control chars", "display_name", "evil\u202etxt.exe", START),
    ("control chars", "output_dir", "runs/a\nb", START),
    ("control chars", "output_dir", "runs/\u2066x\u2069", START),
    ("control chars", "local_datasets", ["data\u202e.jsonl"], BOTH),
    ("control chars", "dataset", "org/d\x1b[2J", BOTH),
    ("control chars", "subset", "sub\x07", BOTH),
    ("control chars", "train_split", "tr\x00ain", BOTH),
    ("control chars", "column_mapping", {"instruction": "q\x1b"}, BOTH),
    ("control chars", "role_mapping", {"bot\x07": "assistant"}, BOTH),
    ("control chars", "target_modules", ["q_proj\x1b"], START),
    ("control chars", "wandb_project", "p\u009b", START),
]


@dataclass
class Attempt:
    route: str
    field: str
    value: Any
    status: int
    fields: list[str]

    @property
    def refused_naming_the_field(self) -> bool:
        named = any(f == self.field or f.startswith(self.field + ".") for f in self.fields)
        return 400 <= self.status < 500 and named


def _send(client: Any, route: str, body: dict[str, Any]) -> Any:
    path = "/api/train/start" if route == "start" else "/api/datasets/preview"
    # json.dumps writes NaN/Infinity as bare literals, the way a careless client would.
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def test_every_bad_input_is_refused_naming_the_field(start_server, demo_run):
    server = start_server(extra_env=worker_env("fault_workers:completes_at_once"))
    client = server.client()
    process = psutil.Process(server.pid)
    rss_before = process.memory_info().rss
    attempts = []
    for _, field, value, routes in TABLE:
        for route in routes:
            base = demo_run() if route == "start" else {"local_datasets": demo_run()["local_datasets"]}
            response = _send(client, route, {**base, field: value})
            error = response.json().get("error", {}) if response.headers.get("content-type", "").startswith("application/json") else {}
            named = [f["field"] for f in error.get("fields") or []] + [error.get("field") or ""]
            attempts.append(Attempt(route, field, value, response.status_code, named))
    assert len(attempts) >= 70
    assert [a for a in attempts if not a.refused_naming_the_field] == []
    assert client.get("/api/runs").json()["total"] == 0
    growth_mb = (process.memory_info().rss - rss_before) / 2**20
    assert growth_mb < RSS_GROWTH_LIMIT_MB, f"server grew by {growth_mb:.0f} MB over the table"



HUGE_BODY = 50 * 2**20
FOREIGN_HOSTS = ("evil.example", "evil.example:8765", "127.0.0.1.nip.io", "localhost.evil.example")


def test_oversized_bodies_and_foreign_hosts_are_refused_and_memory_stays_flat(start_server, demo_run):
    """A 50 MB body (declared, or streamed without a length) is a 413 read no further
    than the limit; a request naming a foreign Host is a 400 before anything else."""
    server = start_server(extra_env=worker_env("fault_workers:completes_at_once"))
    client = server.client()
    process = psutil.Process(server.pid)
    rss_before = process.memory_info().rss
    huge = b'{"model_name": "' + b"x" * HUGE_BODY + b'"}'

    def streamed():
        for _ in range(HUGE_BODY // 2**20):
            yield b" " * 2**20

    for path in ("/api/train/start", "/api/datasets/preview"):
        declared = client.post(path, content=huge, headers={"content-type": "application/json"})
        assert declared.status_code == 413 and declared.json()["error"]["field"] == "body", declared.text[:300]
        chunked = client.post(path, content=streamed(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "too_large", chunked.text[:300]
        for host in FOREIGN_HOSTS:
            foreign = client.post(path, json=demo_run(), headers={"Host": host})
            assert foreign.status_code == 400 and foreign.json()["error"]["field"] == "Host", foreign.text
    assert client.get("/api/runs").json()["total"] == 0
    growth_mb = (process.memory_info().rss - rss_before) / 2**20
    assert growth_mb < RSS_GROWTH_LIMIT_MB, f"server grew by {growth_mb:.0f} MB over 50 MB bodies"
