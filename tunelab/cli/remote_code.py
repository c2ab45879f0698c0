"""`tunelab fingerprint MODEL`: a model's own code files and the fingerprint that approves them.

It reads the files (downloading a hub model's configs and code files, never running any of
them) and prints each with its SHA-256, then the line to put in a run's config. The person
reviews exactly those files before approving them.
"""

from __future__ import annotations

import json
from typing import Callable

from tunelab.exit_codes import EXIT_BAD_CONFIG
from tunelab.remote_code.approval import RemoteCodeUnavailable
from tunelab.remote_code.check import FIELD, current_code, no_code_note


def fingerprint_command(model: str, as_json: bool, fail: Callable[[int, str], Exception]) -> int:
    """Print `model`'s code files and fingerprint (plainly: a fingerprint is copied whole); the exit code."""
    try:
        code = current_code(model)
    except RemoteCodeUnavailable as exc:
        raise fail(EXIT_BAD_CONFIG, f"model_name: {exc}") from None
    if as_json:
        print(json.dumps({"model": model, **code.as_dict()}, indent=2))
        return 0
    if code.fingerprint is None:
        print(no_code_note(code).replace("note: trust_remote_code: ", ""))
        return 0
    for name, digest in sorted(code.files.items()):
        print(f"{digest}  {name}")
    print(f"\nReview these files; to approve exactly them, put in the run's config:\n"
          f"  trust_remote_code: true\n  {FIELD}: {code.fingerprint}")
    return 0
