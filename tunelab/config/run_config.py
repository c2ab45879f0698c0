"""RunConfig: every setting of one fine-tuning run, its defaults and its validation.

This module alone decides what a valid run is, for YAML/JSON files and API bodies alike,
and splits secrets from the `public` form that is stored. It never imports torch:
hardware facts come in through `check_machine`. Its helpers, one job each:
  run_fields      the settings themselves: types, defaults, descriptions, form labels
  config_text     the name, path and secret field types (plain text, sane lengths)
  config_errors   FieldError / ConfigError, and pydantic's errors turned into them
  config_checks   cross-field refusals: the finetune_* switches, the mlx backend's limits,
                  several devices where some are MIG slices; check_machine
  config_files    a config from a YAML/JSON file and --set overrides, and back to YAML
  config_resume   a stored run's config made runnable again, with its secrets
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError, field_validator, model_validator

from tunelab.config.preference import objective_errors
from tunelab.config.grpo import grpo_errors
from tunelab.config.embedding import loss_fits, loss_format_error, normalise_matryoshka_dims
# FINETUNE_SWITCHES, MLX_LR_SCHEDULERS, ConfigError, FieldError, the text field types and the
# settings' own types and bounds are also this module's interface: the rest of tunelab
# imports them from here.
from tunelab.config.checks import FINETUNE_SWITCHES, MLX_LR_SCHEDULERS, check_machine, finetune_switch_errors, mlx_limits  # noqa: F401
from tunelab.config.errors import (ConfigError, ErrorList, FieldError, cross_problems_beside, errors_from_validation,  # noqa: F401
                                   rebuilt_error, unknown_key_error)
from tunelab.config.export_after import export_after_errors, export_after_format
from tunelab.config.run_fields import (MAX_ACCUMULATION_STEPS, MAX_BATCH_SIZE, MAX_EPOCHS, MAX_ROWS, MAX_SEED, MAX_STEPS,  # noqa: F401
                                       Backend, DataFormat, Distributed, MemoryFit, NodesConfig, Precision, ReportTo,
                                       RunFields, S3Source, TrainingType)
from tunelab.layout import layout_errors
from tunelab.remote_code.check import fingerprint_errors
from tunelab.config.text import DisplayName, Name, PathText, Secret  # noqa: F401

SECRET_FIELDS = ("hf_token", "wandb_token")
S3_SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")
# The stored config notes which secrets a run used (never their values), so a resume
# knows what it must be given again: in its request, or in these environment variables.
SECRETS_USED_KEY = "secrets_used"
SECRET_ENVIRONMENT = {
    "hf_token": "HF_TOKEN", "wandb_token": "WANDB_API_KEY", "s3.access_key_id": "AWS_ACCESS_KEY_ID",
    "s3.secret_access_key": "AWS_SECRET_ACCESS_KEY", "s3.session_token": "AWS_SESSION_TOKEN",
}
# Canonical column names a dataset's own columns can be mapped onto.
CANONICAL_COLUMNS = ("instruction", "input", "output", "text", "conversations", "messages", "system", "images", "image",
                     "anchor", "positive", "negative", "sentence1", "sentence2", "score", "query", "document", "label",
                     "prompt", "chosen", "rejected", "completion", "reference")
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class RunConfig(RunFields):
    """Everything one run needs. Field docs double as the CLI/API reference."""

    # defer_build: its validator is made by the first config parsed, not by every import
    # (`tunelab serve` answers sooner; the API's StartRequest is built by FastAPI anyway).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, defer_build=True)

    @field_validator("max_grad_norm")
    @classmethod
    def _clip(cls, v: float) -> float:
        return max(0.0, v)

    @field_validator("max_grad_value", "max_grad_leaf_norm")
    @classmethod
    def _clip_bound(cls, v: float | None) -> float | None:
        # A bound, not a switch like max_grad_norm: a negative one is a mistake, not "off".
        if v is not None and v < 0:
            raise ValueError(f"must be 0 or more, got {v}; leave it empty or set 0 to turn this clipping off")
        return v

    @field_validator("learning_rate")
    @classmethod
    def _lr(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError(f"must be between 0 and 1 (exclusive), got {v}; typical LoRA values are 1e-4 to 3e-4")
        return v

    @field_validator("column_mapping")
    @classmethod
    def _mapping(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if k not in CANONICAL_COLUMNS]
        if bad:
            raise ValueError(f"unknown target {bad}; map onto one of {list(CANONICAL_COLUMNS)}")
        return v

    @field_validator("export_after")
    @classmethod
    def _export_after(cls, v: str | None) -> str | None:
        return export_after_format(v)

    @field_validator("matryoshka_dims")
    @classmethod
    def _matryoshka(cls, v: list[int] | None) -> list[int] | None:
        return normalise_matryoshka_dims(v)

    @model_validator(mode="after")
    def _cross_checks(self) -> "RunConfig":
        errs: list[tuple[str, str]] = []
        if self.max_steps == 0 and self.num_epochs == 0:
            errs.append(("max_steps", "max_steps and num_epochs are both 0; set max_steps > 0 or num_epochs > 0"))
        chosen = [n for n in ("use_dora", "use_rslora", "use_loftq") if getattr(self, n)]
        if len(chosen) > 1:
            errs.append((chosen[1], f"{' and '.join(chosen)} cannot be combined; keep at most one of use_dora, use_rslora, use_loftq"))
        if not self.uses_adapter:
            for name in chosen:
                errs.append((name, f"{name} is an adapter option and does nothing with training_type={self.training_type}; remove it or use training_type=lora"))
            if self.training_type == "full" and self.load_in_4bit:
                # SPEC: 4-bit is forced off for full fine-tuning (it cannot train 4-bit weights).
                object.__setattr__(self, "load_in_4bit", False)
            elif self.load_in_4bit:
                # It trains every weight, and packed 4-bit integers cannot take gradients.
                errs.append(("load_in_4bit", f"training_type={self.training_type} trains every weight and 4-bit weights cannot be trained; set load_in_4bit=false, or use training_type=qlora to train an adapter on a 4-bit base"))
        if self.training_type == "qlora" and not self.load_in_4bit:
            object.__setattr__(self, "load_in_4bit", True)
        errs.extend(finetune_switch_errors(self))
        errs.extend(objective_errors(self))
        errs.extend(grpo_errors(self))
        if self.format != "auto" and self.embedding_loss != "auto" and not loss_fits(self.embedding_loss, self.format):
            errs.append(("embedding_loss", loss_format_error(self.embedding_loss, self.format)))
        if self.warmup_steps is not None and self.warmup_ratio is not None:
            errs.append(("warmup_ratio", "set warmup_steps or warmup_ratio, not both"))
        if self.slice_start is not None and self.slice_end is not None and self.slice_end <= self.slice_start:
            errs.append(("slice_end", "slice_end must be greater than slice_start"))
        if not (self.dataset or self.local_datasets or self.s3):
            errs.append(("dataset", "no training data: set dataset (hub id), local_datasets (file paths) or s3"))
        if self.report_to == "wandb" and not self.wandb_project:
            object.__setattr__(self, "wandb_project", "tunelab")
        if self.resolved_backend == "mlx":
            errs.extend(mlx_limits(self))
        errs.extend(layout_errors(self))
        errs.extend(export_after_errors(self))
        errs.extend(fingerprint_errors(self))
        if errs:
            raise ErrorList(errs)
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _normalise_input(cls, data: Any, handler: Any) -> Any:
        """None means "use the default"; unknown keys and the cross-field checks are reported
        together with every other field's problem, so one attempt shows all that needs
        fixing. Defined after `_cross_checks` so that it wraps them too."""
        if not isinstance(data, dict):
            return handler(data)
        unknown = [k for k in data if k not in cls.model_fields]
        cleaned = {}
        for key, value in data.items():
            field = cls.model_fields.get(key)
            if field is None:
                continue
            if value is None and not field.is_required() and field.get_default(call_default_factory=True) is not None:
                continue
            cleaned[key] = value
        problems = [unknown_key_error(key, data[key], list(cls.model_fields)) for key in unknown]
        try:
            config = handler(cleaned)
        except ValidationError as exc:
            errors = exc.errors()
            problems = [rebuilt_error(err) for err in errors] + problems + cross_problems_beside(cls, cleaned, errors, handler)
        else:
            if not problems:
                return config
        raise ValidationError.from_exception_data(cls.__name__, problems)

    # --- derived facts -------------------------------------------------------------
    @property
    def uses_adapter(self) -> bool:
        return self.training_type in ("lora", "qlora")

    @property
    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return "mlx" if platform.system() == "Darwin" and platform.machine() == "arm64" else "torch"

    @property
    def dataset_label(self) -> str:
        if self.dataset:
            return self.dataset
        if self.local_datasets:
            return ", ".join(Path(p).name for p in self.local_datasets)
        return f"s3://{self.s3.bucket}/{self.s3.prefix}" if self.s3 else ""

    def public(self) -> dict[str, Any]:
        """The config as stored and shown: JSON-safe, with every secret removed."""
        data = self.model_dump(mode="json", exclude=set(SECRET_FIELDS))
        if data.get("s3"):
            for key in S3_SECRET_FIELDS:
                data["s3"].pop(key, None)
        return data

    def worker_payload(self) -> dict[str, Any]:
        """The config handed to a worker process: secrets included, in plain form."""
        data = self.model_dump(mode="json")
        for key in SECRET_FIELDS:
            secret = getattr(self, key)
            data[key] = secret.get_secret_value() if secret else None
        if self.s3:
            for key in S3_SECRET_FIELDS:
                secret = getattr(self.s3, key)
                data["s3"][key] = secret.get_secret_value() if secret else None
        return data

    def secret_names(self) -> list[str]:
        """Which secrets this config carries, by name ("hf_token", "s3.access_key_id", ...)."""
        names = [k for k in SECRET_FIELDS if getattr(self, k)]
        if self.s3:
            names += [f"s3.{k}" for k in S3_SECRET_FIELDS if getattr(self.s3, k)]
        return names

    def secret_values(self) -> list[str]:
        """Every secret string this config carries (for leak checks and log scrubbing)."""
        found = [getattr(self, k).get_secret_value() for k in SECRET_FIELDS if getattr(self, k)]
        if self.s3:
            found += [getattr(self.s3, k).get_secret_value() for k in S3_SECRET_FIELDS if getattr(self.s3, k)]
        return [s for s in found if s]


def parse_config(data: dict[str, Any]) -> RunConfig:
    """Validate a mapping into a RunConfig, raising ConfigError on any problem."""
    if not isinstance(data, dict):
        raise ConfigError.single("config", "must be a mapping of setting: value")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(errors_from_validation(exc)) from None
