"""The one reading of a run id (and a sweep id) written in a request path.

The role rules (roles.py) and every route's `{run_id}` parameter (`RunId`) read the id with
`parse_run_id`, so the ownership check and the route can never disagree on which run a
request names: a spelling one of them read as run 1 and the other could not read at all
once let a member act on another member's run.

A run id is plain decimal digits: no sign, no leading zero, no decimal point, exponent or
space, at most 18 digits (the store's ids are 64-bit integers). Anything else is a 422
naming `run_id`, for every caller, before any role or ownership decision. So is an id that
was percent-encoded in the request line (`/api/runs/%31`): Starlette decodes the path before
routing, and refusing the encoded form keeps "what the client wrote" and "what was read"
the same thing.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Path
from pydantic import BeforeValidator

# [0-9], not \d: \d also matches other scripts' digits, which int() would read.
_PLAIN_ID = re.compile(r"[1-9][0-9]{0,17}")
MAX_RUN_ID = 10**18 - 1
RULE = "a run id is plain digits such as 7 (no sign, leading zero, decimal point, exponent, space or %-escape)"


def parse_run_id(text: str, rule: str = RULE) -> int:
    """The run id `text` spells; ValueError saying the rule for anything but plain digits."""
    if not isinstance(text, str) or _PLAIN_ID.fullmatch(text) is None:
        shown = text if isinstance(text, str) and len(text) <= 40 else f"{str(text)[:40]}..."
        raise ValueError(f"{rule}; got {shown!r}")
    return int(text)


def _from_path(value: Any) -> Any:
    return parse_run_id(value) if isinstance(value, str) else value


def _sweep_from_path(value: Any) -> Any:
    return parse_run_id(value, SWEEP_RULE) if isinstance(value, str) else value


# Path before the validator: so the OpenAPI document shows the bounds as minimum/maximum.
RunId = Annotated[int, Path(ge=1, le=MAX_RUN_ID, description="The run (job) id: plain digits, e.g. 7."),
                  BeforeValidator(_from_path)]
# A sweep's id is a 64-bit row id too, read by the same rule: a longer one was a 500 (the
# store cannot bind it) until the route read it this way.
SWEEP_RULE = RULE.replace("a run id", "a sweep id")
SweepId = Annotated[int, Path(ge=1, le=MAX_RUN_ID, description="The sweep id: plain digits, e.g. 3."),
                    BeforeValidator(_sweep_from_path)]
