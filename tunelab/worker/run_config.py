"""The run config as a worker holds it: `RunConfig`, re-validated once from the payload.

The parent hands its child a plain JSON-safe mapping (`RunConfig.worker_payload()`, plus
the facts only the parent knows: `run_id`, `resumed_from_run_id`). The child validates it
here, once, at its entry (`entry.run_in_context`: the spawned worker, every torchrun or Ray
rank) and passes the typed object down, so worker code reads `config.learning_rate` and
gets RunConfig's own defaults instead of re-stating them.

Secrets are plain strings here, in the child only: the worker hands them to the hub,
W&B and boto3, and its failure messages are scrubbed of them (`secret_values`). The
parent keeps them as SecretStr. The layout of the run on this node is planned once per
process and cached (`layout`): the GPUs a process can see do not change while it runs.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import PrivateAttr, ValidationError

from tunelab import layout as run_layout
from tunelab.config.errors import ConfigError, errors_from_validation
from tunelab.config.run_config import S3_SECRET_FIELDS, SECRET_FIELDS, RunConfig, S3Source


class WorkerS3Source(S3Source):
    """S3Source with its keys in plain text (for boto3)."""

    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None


class WorkerConfig(RunConfig):
    """RunConfig with plain-text secrets and the facts the parent adds to the payload."""

    hf_token: str | None = None
    wandb_token: str | None = None
    s3: WorkerS3Source | None = None
    # The run's id in the store (export_after's manifest names it); None in a bare worker.
    run_id: int | None = None
    # The run this one resumes (export_after names a resumed run's export after it).
    resumed_from_run_id: int | None = None

    _layout: run_layout.Layout | None = PrivateAttr(default=None)

    @property
    def layout(self) -> run_layout.Layout:
        """How many processes this run trains in on this node, planned once per process."""
        if self._layout is None:
            self._layout = run_layout.plan(self.model_dump(), run_layout.visible_gpu_count(os.environ))
        return self._layout

    def payload(self) -> dict[str, Any]:
        """JSON-safe, secrets included: what a rank of this run is handed (torchrun's 0600
        file, Ray's driver), to validate again on its side."""
        return self.model_dump(mode="json")

    def secret_values(self) -> list[str]:
        found = [getattr(self, k) for k in SECRET_FIELDS]
        if self.s3:
            found += [getattr(self.s3, k) for k in S3_SECRET_FIELDS]
        return [s for s in found if s]


def worker_config(payload: dict[str, Any] | WorkerConfig) -> WorkerConfig:
    """The typed config of a payload (a WorkerConfig is passed through as it is).
    Raises ConfigError naming every field a payload fails on: one made by
    `worker_payload()` never does, but a hand-written rank file or test may."""
    if isinstance(payload, WorkerConfig):
        return payload
    try:
        return WorkerConfig.model_validate(payload)
    except ValidationError as exc:
        raise ConfigError(errors_from_validation(exc)) from None


def stored_config(stored: dict[str, Any]) -> WorkerConfig:
    """A finished run's stored config (secrets left out, `secrets_used` noted) as worker
    code reads it: the evaluate child measures the run's data exactly as its worker did."""
    fields = WorkerConfig.model_fields
    return worker_config({key: value for key, value in stored.items() if key in fields})


def model_reference(model_name: str, **settings: Any) -> WorkerConfig:
    """The settings a model is read with outside a run (inference, export): its name and
    the hub or remote-code settings given. Not validated as a run: it names no data, and
    the run-level cross-checks do not apply to a model being looked at."""
    return WorkerConfig.model_construct(model_name=model_name, **settings)


def payload_secrets(payload: Any) -> list[str]:
    """The secrets in a payload that did not validate, to scrub them from its error."""
    if not isinstance(payload, dict):
        return []
    s3 = payload.get("s3") if isinstance(payload.get("s3"), dict) else {}
    found = [payload.get(k) for k in SECRET_FIELDS] + [s3.get(k) for k in S3_SECRET_FIELDS]
    return [s for s in found if isinstance(s, str) and s]
