"""`typed(settings)`: a test's partial run settings as the worker holds them.

The worker reads a validated `WorkerConfig`, never a dict. Unit tests of worker
functions name only the settings they are about; this fills in what every run config
must have (a model name, and a data source where the test gives none) and validates the
rest exactly as a worker's entry does, so a test cannot hand a worker a config no run
could have.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.run_config import WorkerConfig, worker_config

PLACEHOLDER_MODEL = "tunelab-test/model"
PLACEHOLDER_DATA = "unused-by-this-test.jsonl"


def typed(settings: dict[str, Any] | WorkerConfig | None = None, **more: Any) -> WorkerConfig:
    if isinstance(settings, WorkerConfig):
        return settings.model_copy(update=more) if more else settings
    given = {**(settings or {}), **more}
    if not (given.get("dataset") or given.get("local_datasets") or given.get("s3")):
        given["local_datasets"] = [PLACEHOLDER_DATA]
    return worker_config({"model_name": PLACEHOLDER_MODEL, **given})
