"""Pure helpers of the run store: checking values before they are written and shaping rows read.

Nothing here touches the database: the mixins (runs.py, queue.py, metrics.py) call these
before a write, and `run_dict` turns a `runs` row into the dict every reader gets.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Mapping

from tunelab.events import MODALITIES, clean_extra, finite_or_none
from tunelab.store.errors import InvalidValue
from tunelab.store.schema import METRIC_FIELDS
from tunelab.text import char_name, first_unsafe_char

# Keys that hold secrets anywhere in a config; storing one is a bug in the caller.
SECRET_KEYS = frozenset(
    {"hf_token", "wandb_token", "access_key_id", "secret_access_key", "session_token", "password", "token", "api_key"}
)
# Config mappings whose keys are the dataset's own column and role names, not settings:
# a chat role may well be called "token" or "password".
DATA_NAME_MAPPINGS = frozenset({"column_mapping", "role_mapping"})
NAME_MAX_CHARS = 200
SPARKLINE_POINTS = 50


def sparkline(losses: Iterable[Any], points: int = SPARKLINE_POINTS) -> list[float]:
    """At most `points` finite losses, evenly spaced over the run, first and last kept."""
    values = [v for v in (finite_or_none(x) for x in losses) if v is not None]
    if len(values) <= points:
        return values
    if points < 2:
        return values[-points:] if points > 0 else []
    last = len(values) - 1
    return [values[round(i * last / (points - 1))] for i in range(points)]


def check_no_secrets(config: Any, where: str = "config") -> None:
    """Defence in depth: refuse a config that still carries a secret-named key."""
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key in DATA_NAME_MAPPINGS:
                continue
            if str(key).lower() in SECRET_KEYS:
                raise InvalidValue(f"{where}.{key}", "looks like a secret and is never stored; pass RunConfig.public()")
            check_no_secrets(value, f"{where}.{key}")
    elif isinstance(config, (list, tuple)):
        for i, item in enumerate(config):
            check_no_secrets(item, f"{where}[{i}]")


def clean_display_name(name: Any) -> str:
    text = name.strip() if isinstance(name, str) else ""
    if not 1 <= len(text) <= NAME_MAX_CHARS:
        raise InvalidValue("display_name", f"must be 1 to {NAME_MAX_CHARS} characters of text, got {len(text)}")
    found = first_unsafe_char(text)
    if found is not None:
        raise InvalidValue("display_name", f"must not contain control or bidi-override characters such as line breaks "
                                           f"({char_name(found[1])} at position {found[0]})")
    return text


def check_modality(modality: Any) -> str:
    if modality not in MODALITIES:
        raise InvalidValue("modality", f"must be one of {', '.join(MODALITIES)}, got {modality!r}")
    return modality


def run_dict(row: sqlite3.Row) -> dict[str, Any]:
    run = dict(row)
    run["config"] = json.loads(run.pop("config_json"))
    run["loss_sparkline"] = json.loads(run["loss_sparkline"] or "[]")
    run["cancel_requested"] = bool(run["cancel_requested"])
    run["resume_blocked"] = bool(run["resume_blocked"])
    for key in ("device_request", "devices"):
        run[key] = json.loads(run[key]) if run.get(key) else None
    return run


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1_000_000 <= priority <= 1_000_000:
        raise InvalidValue("queue_priority", f"must be a whole number from -1000000 to 1000000 (higher starts first), got {priority!r}")
    return priority


def check_devices(devices: Any) -> list[Any]:
    if not isinstance(devices, (list, tuple)) or len(set(map(str, devices))) != len(devices):
        raise InvalidValue("devices", f"must be a list of distinct device ids, got {devices!r}")
    return list(devices)


def json_or_none(field: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidValue(field, f"is not standard JSON: {exc}") from None


def metric_values(row: Mapping[str, Any]) -> tuple[int, list[Any], dict[str, float]]:
    """A metric row's step, its fixed fields in METRIC_FIELDS order, and its extras."""
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidValue("step", f"must be a whole number >= 0, got {step!r}")
    values = [finite_or_none(row.get(f)) for f in METRIC_FIELDS]
    tokens = METRIC_FIELDS.index("num_tokens")
    if values[tokens] is not None:
        values[tokens] = int(values[tokens])
    return step, values, clean_extra(row.get("extra"))
