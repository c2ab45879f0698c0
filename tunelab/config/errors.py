"""How a run's config reports what is wrong: one `FieldError` per bad field, each saying
how to fix it, gathered in a `ConfigError` (CLI exit 2, HTTP 422).

`errors_from_validation` turns pydantic's errors into those, in plain words ("must be 1 or
more", not "Input should be greater than or equal to 1") and with locations that never
show a user's raw key; `ErrorList` carries several fields' errors out of one validator;
`cross_problems_beside` finds the cross-field problems of a config whose fields are not
all valid; `unknown_key_error` names the closest known setting.
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


# What a required field that was refused stands in as while the cross-field checks run
# on the rest of a config (`cross_problems_beside`).
REQUIRED_STAND_INS = {"model_name": "stand-in/model"}


def cross_problems_beside(model: Any, cleaned: dict[str, Any], errors: list[dict[str, Any]], handler: Any) -> list[dict[str, Any]]:
    """pydantic runs a model's "after" validators (RunConfig's cross-field checks) only once
    every field is valid. So that their problems are not left for a second attempt, they
    run again here (`handler`, inside a wrap validator) on the valid fields, with the bad
    ones at their defaults; a problem on a field already refused is left out."""
    if any(not err["loc"] for err in errors):
        return []  # the cross checks did run: every field was valid
    bad = {str(err["loc"][0]) for err in errors}
    rest = {k: v for k, v in cleaned.items() if k not in bad}
    for name in bad:
        if name in model.model_fields and model.model_fields[name].is_required():
            if name not in REQUIRED_STAND_INS:
                return []
            rest[name] = REQUIRED_STAND_INS[name]
    try:
        handler(rest)
    except ValidationError as exc:
        pairs = [(f, m) for err in exc.errors() if isinstance((err.get("ctx") or {}).get("error"), ErrorList)
                 for f, m in err["ctx"]["error"].pairs if f.split(".")[0] not in bad]
        if pairs:
            return [{"type": "value_error", "loc": (), "input": rest, "ctx": {"error": ErrorList(pairs)}}]
    return []


def rebuilt_error(err: dict[str, Any]) -> dict[str, Any]:
    """A reported error in the form ValidationError.from_exception_data takes again."""
    if err["type"] == "value_error":  # keeps ctx["error"], e.g. an ErrorList of several fields
        return {"type": "value_error", "loc": err["loc"], "input": err["input"], "ctx": err["ctx"]}
    message = err["msg"].replace("{", "{{").replace("}", "}}")
    # The context (a bound such as ge=1) travels too: the plain-words message is made from it.
    return {"type": PydanticCustomError(err["type"], message, err.get("ctx")), "loc": err["loc"], "input": err["input"]}


def _plain(kind: str, ctx: dict[str, Any]) -> str | None:
    """Pydantic's wording for the common refusals, said plainly (None: keep pydantic's)."""
    try:
        return _plain_words(kind, ctx)
    except KeyError:  # an error without the context its kind usually has
        return None


def _plain_words(kind: str, ctx: dict[str, Any]) -> str | None:
    if kind == "greater_than_equal":
        return f"must be {ctx['ge']} or more"
    if kind == "greater_than":
        return f"must be more than {ctx['gt']}"
    if kind == "less_than_equal":
        return f"must be {ctx['le']} or less"
    if kind == "less_than":
        return f"must be less than {ctx['lt']}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type"):
        return "must be a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "string_too_short":
        return "must not be empty" if ctx["min_length"] == 1 else f"must be at least {ctx['min_length']} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} items"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} items"
    if kind == "string_type":
        return "must be text"
    if kind == "list_type":
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping of setting: value"
    return None


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
        else:
            msg = _plain(err["type"], err.get("ctx") or {}) or msg
        out.append(FieldError(field=loc, message=msg))
    return out
