"""How a run's config reports what is wrong: one `FieldError` per bad field, each saying
how to fix it, gathered in a `ConfigError` (CLI exit 2, HTTP 422).

`errors_from_validation` turns pydantic's errors into those, with readable messages and
locations that never show a user's raw key; `ErrorList` carries several fields' errors
out of one validator; `unknown_key_error` names the closest known setting.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from tunelab.text import printable


class FieldError(BaseModel):
    field: str
    message: str


class ConfigError(ValueError):
    """A config that cannot run; `errors` names each bad field and its fix."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))

    @classmethod
    def single(cls, field: str, message: str) -> "ConfigError":
        return cls([FieldError(field=field, message=message)])


class ErrorList(ValueError):
    """Several (field, message) pairs raised from one validator, kept apart per field."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = pairs
        super().__init__("; ".join(f"{f}: {m}" for f, m in pairs))


def unknown_key_error(key: Any, value: Any, known: list[str]) -> dict[str, Any]:
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "remove it; see `tunelab fields` for the settings"
    message = f"unknown setting '{printable(key, 80)}'; {hint}"
    return {"type": PydanticCustomError("unknown_setting", message.replace("{", "{{").replace("}", "}}")),
            "loc": (key,), "input": value}


def rebuilt_error(err: dict[str, Any]) -> dict[str, Any]:
    """A reported error in the form ValidationError.from_exception_data takes again."""
    if err["type"] == "value_error":  # keeps ctx["error"], e.g. an ErrorList of several fields
        return {"type": "value_error", "loc": err["loc"], "input": err["input"], "ctx": err["ctx"]}
    message = err["msg"].replace("{", "{{").replace("}", "}}")
    return {"type": PydanticCustomError(err["type"], message), "loc": err["loc"], "input": err["input"]}


def errors_from_validation(exc: ValidationError) -> list[FieldError]:
    """Turn pydantic's errors into one FieldError per bad field, with readable messages."""
    out: list[FieldError] = []
    for err in exc.errors():
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, ErrorList):
            out.extend(FieldError(field=f, message=m) for f, m in ctx_error.pairs)
            continue
        # A location may be a user's own dict key: shown escaped and short, never raw.
        loc = ".".join(printable(p, 80) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "is required"
        elif err["type"] == "extra_forbidden":
            msg = "unknown setting; remove it"
        elif err["type"] == "finite_number":
            msg = "must be a finite number (NaN and Infinity are not numbers a run can use)"
        out.append(FieldError(field=loc, message=msg))
    return out
