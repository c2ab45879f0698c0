"""A run's config from a YAML or JSON file and `--set key=value` overrides, and back to YAML.

Relative data, eval-data and reward-file paths in a file are made absolute against the
file's own folder, as most tools do; every value then goes through `parse_config`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tunelab.config.run_config import RunConfig, parse_config
from tunelab.config.errors import ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the CLI; the value is read as YAML so numbers and lists work."""
    if "=" not in text:
        raise ConfigError.single("--set", f"'{text}' is not key=value; write e.g. --set learning_rate=1e-4")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _set_override(data: dict[str, Any], key: str, value: Any) -> None:
    """`key=value`, or `section.key=value` into a nested setting (nodes.node_rank=1, s3.bucket=b),
    keeping the section's other keys from the file."""
    section, dot, inner = key.partition(".")
    if dot and inner and section in RunConfig.model_fields:
        nested = data.get(section)
        data[section] = {**(nested if isinstance(nested, dict) else {}), inner: value}
    else:
        data[key] = value


def load_config_file(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Load YAML or JSON from a file, apply `key=value` overrides, validate."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError.single("config", f"cannot read {path}: {exc.strerror}; check the path") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError.single("config", f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError.single("config", f"{path} must hold a mapping of setting: value")
    for item in overrides or []:
        key, value = parse_override(item)
        _set_override(data, key, value)
    # Relative data paths in a config file are relative to the file, like most tools do.
    for key in ("local_datasets", "local_eval_datasets"):
        if isinstance(data.get(key), list):
            data[key] = [str((path.parent / p).resolve()) if not Path(p).is_absolute() else p for p in data[key]]
    rewards = data.get("rewards")
    for spec in rewards if isinstance(rewards, list) else []:
        if isinstance(spec, dict) and isinstance(spec.get("path"), str) and not Path(spec["path"]).is_absolute():
            spec["path"] = str((path.parent / spec["path"]).resolve())  # a reward file, like the data
    return parse_config(data)


def dump_config_yaml(cfg: RunConfig) -> str:
    """The public config as YAML, without defaults-only noise or secrets."""
    return yaml.safe_dump(cfg.public(), sort_keys=False)
