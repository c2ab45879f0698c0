"""The messages exchanged between a worker process and the orchestrator (SPEC §3).

Worker -> parent events are small dicts with `type` and `ts`; parent -> worker stop
messages are `{"type": "stop", "save": bool}`. This module is the only thing the
worker and the parent share, so both build and check messages with it.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any, Mapping

from tunelab import families

STATUS = "status"
MODEL_LOAD_STARTED = "model_load_started"
MODEL_LOAD_COMPLETED = "model_load_completed"
STALL = "stall"
PROGRESS = "progress"
EVAL_CONFIGURED = "eval_configured"
OUTPUT_DIR = "output_dir"
MODALITY = "modality"
COMPLETE = "complete"
ERROR = "error"

EVENT_TYPES = frozenset(
    {STATUS, MODEL_LOAD_STARTED, MODEL_LOAD_COMPLETED, STALL, PROGRESS, EVAL_CONFIGURED, OUTPUT_DIR, MODALITY,
     COMPLETE, ERROR}
)
# What a run trains on, as its worker decides once the data is prepared (a vision model
# given text-only rows trains as "text"). The one list of known values, from the family
# specs (a new family's spec adds its word), and the store, API, page and CLI take it from here.
MODALITIES = families.modalities()
DEFAULT_MODALITY = families.DEFAULT.modality  # what runs recorded before modalities existed were
# Numeric progress fields; any of them may be None (unknown or non-finite).
PROGRESS_NUMBERS = (
    "total_steps", "epoch", "loss", "learning_rate", "grad_norm", "eval_loss",
    "num_tokens", "elapsed_seconds", "eta_seconds", "peak_memory_gb", "peak_memory_reserved_gb",
)
PROGRESS_FIELDS = ("step",) + PROGRESS_NUMBERS
# Further numbers a method logs (token accuracy, nDCG@10, reward margins) ride along as
# `progress.extra` {name: value}: at most EXTRA_MAX_COUNT per event, names of word
# characters and . / @ - up to EXTRA_NAME_MAX_CHARS long. Anything else is dropped at
# this boundary, so the store and the page only ever see short, plain names.
EXTRA_MAX_COUNT = 32
EXTRA_NAME_MAX_CHARS = 64
EXTRA_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@-]*")
# The largest count the run database can hold (a signed 64-bit integer).
MAX_COUNT = 2**63 - 1


class MalformedEvent(ValueError):
    """An event that cannot be applied; the pump logs and skips it."""


def make(event_type: str, **fields: Any) -> dict[str, Any]:
    """Build an event of a known type, stamped with the current time."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    return {"type": event_type, "ts": time.time(), **fields}


def status(message: str) -> dict[str, Any]:
    return make(STATUS, message=message)


def progress(step: int, extra: Mapping[str, Any] | None = None, **numbers: Any) -> dict[str, Any]:
    unknown = set(numbers) - set(PROGRESS_NUMBERS)
    if unknown:
        raise ValueError(f"unknown progress fields {sorted(unknown)}")
    return make(PROGRESS, step=int(step), **{k: numbers.get(k) for k in PROGRESS_NUMBERS}, extra=clean_extra(extra))


def is_extra_name(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= EXTRA_NAME_MAX_CHARS and EXTRA_NAME.fullmatch(name) is not None


def clean_extra(raw: Any) -> dict[str, float]:
    """The usable part of an `extra` mapping: finite numbers under well-formed names that
    are not already progress fields, the first EXTRA_MAX_COUNT of them. Non-finite values
    are left out (an unknown extra is simply absent), as is anything that is not a mapping."""
    if not isinstance(raw, Mapping):
        return {}
    clean: dict[str, float] = {}
    for name, value in raw.items():
        number = finite_or_none(value)
        if number is None or not is_extra_name(name) or name in PROGRESS_FIELDS:
            continue
        clean[name] = number
        if len(clean) == EXTRA_MAX_COUNT:
            break
    return clean


def modality(name: str) -> dict[str, Any]:
    """The run's modality (one of MODALITIES), sent once the worker knows what it trains on."""
    if name not in MODALITIES:
        raise ValueError(f"unknown modality {name!r}; add it to events.MODALITIES {MODALITIES}")
    return make(MODALITY, modality=name)


def complete(output_dir: str | None, status_message: str, checkpoint: Any = None, stopped: bool = False) -> dict[str, Any]:
    """The worker's last word. `checkpoint` is the `checkpoint-N` folder it wrote last (the
    stop-and-save or the final save); finalize checks exactly that folder, since the last
    reported step can lag the step saved (logging every N steps). `stopped`: the run ended
    early with a stop-and-save (asked by the parent, or by a signal to the worker itself)."""
    step = _checkpoint_step(str(checkpoint)) if checkpoint is not None else None
    return make(COMPLETE, output_dir=output_dir, status_message=status_message, stopped=stopped,
                checkpoint_step=step, checkpoint_dir=str(checkpoint) if checkpoint is not None else None)


def _checkpoint_step(folder: str) -> int:
    number = Path(folder).name.removeprefix("checkpoint-")
    if not number.isdigit() or number == Path(folder).name:
        raise ValueError(f"{folder!r} is not a checkpoint-<step> folder")
    return int(number)


def error(message: str, stack: str = "", resume_blocked: bool = False) -> dict[str, Any]:
    return make(ERROR, error=message, stack=stack, resume_blocked=resume_blocked)


def stop_message(save: bool) -> dict[str, Any]:
    return {"type": "stop", "save": bool(save)}


def finite_or_none(value: Any) -> float | None:
    """A float for finite numbers, None for NaN/inf/garbage (never a stale substitute)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def parse(raw: Any) -> dict[str, Any]:
    """Check an event from a worker and return a clean copy; raise MalformedEvent if unusable."""
    if not isinstance(raw, dict):
        raise MalformedEvent(f"event is {type(raw).__name__}, not a dict")
    kind = raw.get("type")
    if kind not in EVENT_TYPES:
        raise MalformedEvent(f"unknown event type {kind!r}")
    event = dict(raw)
    event["ts"] = finite_or_none(raw.get("ts")) or time.time()
    if kind == PROGRESS:
        step = raw.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_COUNT:
            raise MalformedEvent(f"progress event has bad step {step!r}")
        for key in PROGRESS_NUMBERS:
            event[key] = finite_or_none(raw.get(key))
        for key in ("total_steps", "num_tokens"):
            if event[key] is not None:
                # A count no store can hold is as unknown as a NaN (and must not poison a write).
                event[key] = int(event[key]) if abs(event[key]) <= MAX_COUNT else None
        event["extra"] = clean_extra(raw.get("extra"))
    elif kind == MODALITY:
        if raw.get("modality") not in MODALITIES:
            raise MalformedEvent(f"modality event names {raw.get('modality')!r}, not one of {MODALITIES}")
    elif kind in (STATUS, STALL):
        if not isinstance(raw.get("message"), str):
            raise MalformedEvent(f"{kind} event without a text message")
    elif kind == ERROR:
        event["error"] = str(raw.get("error") or "worker reported an error")
        event["stack"] = str(raw.get("stack") or "")
        event["resume_blocked"] = bool(raw.get("resume_blocked", False))
    elif kind in (COMPLETE, OUTPUT_DIR):
        out = raw.get("output_dir")
        if out is not None and not isinstance(out, str):
            raise MalformedEvent(f"{kind} event has bad output_dir {out!r}")
        if kind == COMPLETE:
            event["status_message"] = str(raw.get("status_message") or "")
            event["stopped"] = raw.get("stopped") is True
            _parse_checkpoint(raw, event)
    return event


def _parse_checkpoint(raw: dict[str, Any], event: dict[str, Any]) -> None:
    """A `complete` names its checkpoint by step and folder, both or neither."""
    step, folder = raw.get("checkpoint_step"), raw.get("checkpoint_dir")
    if step is None and folder is None:
        event["checkpoint_step"] = event["checkpoint_dir"] = None
        return
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_COUNT or not isinstance(folder, str):
        raise MalformedEvent(f"complete event has a bad checkpoint ({step!r}, {folder!r})")
