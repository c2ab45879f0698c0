"""Schemathesis hooks for fuzzing a live tunelab server; `st run` loads them through
SCHEMATHESIS_HOOKS=fuzz_hooks (this folder on PYTHONPATH).

Random bodies almost never make a valid run (a readable model and data file, settings
that agree with each other), so every generated start would stop at validation and the
code behind it (the store, the orchestrator, the worker's spawn) would go unfuzzed. So
half of the generated (positive) start bodies are repaired: they get the demo model and data
(FUZZ_MODEL_DIR, FUZZ_TRAIN_FILE), and every field RunConfig refuses is dropped until it
accepts the rest, so each start still carries its own random mix of valid settings.
Before a start is sent, the previous fuzzed run gets a moment to end (FUZZ_BASE_URL,
FUZZ_TOKEN), or nearly every start would meet a run still active and get a 409. Half of
the generated run ids point at runs that exist (1..FUZZ_RUN_IDS). Which half is decided
by a checksum of the generated value, so a replay is the same.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from typing import Any

import httpx
import schemathesis

from tunelab.config.run_config import ConfigError, parse_config

START = ("POST", "/api/train/start")
# Paths checked against the server's folders, GPU ids checked against the machine and
# settings that need the server's opt-in: refused after RunConfig accepts them, so a
# repaired body leaves them out.
UNREPAIRABLE = ("resume_from", "local_eval_datasets", "gpu_ids", "mlflow_tracking_uri", "trust_remote_code",
                "allow_output_outside_root")
REPAIR_ROUNDS = 10
IDLE_WAIT_S = 5.0


def _heads(value: Any) -> bool:
    return zlib.crc32(json.dumps(value, sort_keys=True, default=str).encode()) % 2 == 0


def _repaired(body: dict[str, Any]) -> dict[str, Any]:
    body = {key: value for key, value in body.items() if key not in UNREPAIRABLE}
    body.update(model_name=os.environ["FUZZ_MODEL_DIR"], local_datasets=[os.environ["FUZZ_TRAIN_FILE"]],
                dataset=None, s3=None)
    for _ in range(REPAIR_ROUNDS):
        try:
            parse_config({key: value for key, value in body.items() if key != "start_request_id"})
            return body
        except ConfigError as exc:
            refused = {error.field.split(".")[0] for error in exc.errors}
            body = {key: value for key, value in body.items() if key not in refused or key == "model_name"}
    return body


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: Any, kwargs: dict[str, Any]) -> None:
    # Negative cases are left as generated: the server is meant to refuse them.
    positive = case.meta is None or case.meta.generation.mode == schemathesis.GenerationMode.POSITIVE
    known = int(os.environ.get("FUZZ_RUN_IDS", "0"))
    if positive and known and "run_id" in (case.path_parameters or {}) and _heads(case.path_parameters):
        case.path_parameters = {**case.path_parameters, "run_id": 1 + zlib.crc32(case.id.encode()) % known}
    if (case.method.upper(), case.path) != START:
        return
    if positive and isinstance(case.body, dict) and _heads(case.body):
        case.body = _repaired(case.body)
    if "FUZZ_BASE_URL" in os.environ:
        _wait_until_idle()


def _wait_until_idle() -> None:
    headers = {"Authorization": f"Bearer {os.environ['FUZZ_TOKEN']}"}
    deadline = time.monotonic() + IDLE_WAIT_S
    while time.monotonic() < deadline:
        status = httpx.get(os.environ["FUZZ_BASE_URL"] + "/api/train/status", headers=headers, timeout=10).json()
        if not status.get("is_training_running"):
            return
        time.sleep(0.05)
