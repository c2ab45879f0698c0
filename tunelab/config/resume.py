"""A stored run's config made runnable again, and the secrets that takes.

tunelab never stores a secret: a run's stored (public) config records only which secrets
it used (`SECRETS_USED_KEY`). `resume_config` takes each one from the resume request or
its environment variable, or names the one missing; `secrets_from_environment` shapes the
environment's secrets like a resume request's body, for a client to hand on.
"""

from __future__ import annotations

from typing import Any, Mapping

from tunelab.config.run_config import SECRET_ENVIRONMENT, SECRETS_USED_KEY, RunConfig, parse_config
from tunelab.config.errors import ConfigError, FieldError


def stored_settings(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored (public) config's settings, without the record of which secrets it used."""
    return {k: v for k, v in stored.items() if k != SECRETS_USED_KEY}


def resume_config(stored: dict[str, Any], given: dict[str, Any] | None, environ: Mapping[str, str]) -> RunConfig:
    """A stored (public) config made runnable again: each secret the run used comes from
    `given` (same shape as a config: hf_token, wandb_token, s3.{keys}) or else from its
    environment variable. A secret found in neither is a ConfigError naming it."""
    given = given or {}
    data = stored_settings(stored)
    if isinstance(data.get("s3"), dict):
        data["s3"] = dict(data["s3"])
    missing = []
    for name in stored.get(SECRETS_USED_KEY) or []:
        section, _, key = name.rpartition(".")
        value = (given.get(section) or {}).get(key) if section else given.get(key)
        value = value or environ.get(SECRET_ENVIRONMENT.get(name, ""))
        target = data.get(section) if section else data
        if not value or not isinstance(target, dict):
            missing.append(name)
            continue
        target[key] = value
    if missing:
        raise ConfigError([
            FieldError(field=name, message=f"the run used {name}, which tunelab never stores; give it again with the "
                       f"resume (request body {name}) or set {SECRET_ENVIRONMENT.get(name, 'it')} in the environment")
            for name in missing
        ])
    return parse_config(data)


def secrets_from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The secrets the environment holds (HF_TOKEN, WANDB_API_KEY, AWS_*), shaped like a
    resume request's body, so a client can hand its own environment's secrets on."""
    found: dict[str, Any] = {}
    for name, variable in SECRET_ENVIRONMENT.items():
        value = environ.get(variable)
        if not value:
            continue
        section, _, key = name.rpartition(".")
        (found.setdefault(section, {}) if section else found)[key] = value
    return found
