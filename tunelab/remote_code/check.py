"""`approved_remote_code_fingerprint`: the setting, its config checks, and the check that
refuses to load a model whose code is not the approved code.

A run with `trust_remote_code: true` and a fingerprint loads only when the model's code
files (`remote_code.read_remote_code`) have exactly that fingerprint; the training worker
checks before the backend imports anything of the model, and export, chat and eval check
again before their child process loads it. Every fingerprint computed here is remembered
with its file listing (`<home>/remote_code/<fingerprint>.json`), so a refusal can name
the files that changed since the approved code was seen, not only the two fingerprints.
Torch-free.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from tunelab import paths
from tunelab.remote_code.approval import RemoteCode, RemoteCodeUnavailable, read_remote_code

FIELD = "approved_remote_code_fingerprint"
HELP = ("SHA-256 of the model's own code files (those its configs' auto_map name, and their relative imports); "
        "with trust_remote_code, the run loads only if the code it is about to run has this fingerprint. "
        "See it with `tunelab fingerprint MODEL`, or in the dataset preview and memory estimate.")
FINGERPRINT = re.compile(r"[0-9a-f]{64}")


class RemoteCodeRefused(Exception):
    """The model's code is not the approved code, or cannot be checked; names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def fingerprint_errors(cfg: Any) -> list[tuple[str, str]]:
    """Config refusals: a fingerprint that is not one, or one with nothing to approve."""
    value = getattr(cfg, FIELD)
    if value is None:
        return []
    if not FINGERPRINT.fullmatch(value.strip().lower()):
        return [(FIELD, f"{value[:80]!r} is not a SHA-256 fingerprint (64 hexadecimal characters); "
                        "copy it from `tunelab fingerprint MODEL`")]
    if not cfg.trust_remote_code:
        return [(FIELD, "a fingerprint approves remote code, which runs only with trust_remote_code=true; "
                        "set trust_remote_code=true, or remove approved_remote_code_fingerprint")]
    return []


def no_code_note(code: RemoteCode) -> str:
    return (f"note: trust_remote_code: {code.model} names no code of its own (no auto_map in its configs), "
            "so trust_remote_code=true changes nothing; it can be left false")


def current_code(model: str, token: str | None = None, download: bool = True) -> RemoteCode:
    """The model's code files now, remembered by fingerprint (see the module docstring)."""
    code = read_remote_code(model, token, download)
    if code.fingerprint:
        _remember(code)
    return code


def check_approved(config: Mapping[str, Any], model: str | None = None) -> RemoteCode | None:
    """Refuse (RemoteCodeRefused) to load `model` (by default the run's model_name) with
    `config`'s trust_remote_code unless its code has the approved fingerprint. Returns the
    code read (unpinned: where it could be read), or None without trust_remote_code."""
    if not config.get("trust_remote_code"):
        return None
    expected = (config.get(FIELD) or "").strip().lower()
    model = model or str(config.get("model_name") or "")
    if not expected:  # unpinned: read only for the note on a model with no code; the load reports real problems
        try:
            return current_code(model, config.get("hf_token") or None)
        except RemoteCodeUnavailable:
            return None
    try:
        code = current_code(model, config.get("hf_token") or None)
    except RemoteCodeUnavailable as exc:
        raise RemoteCodeRefused(FIELD, f"the code of {model} cannot be checked against the approved fingerprint, "
                                       f"so none of it is run: {exc}") from None
    if code.fingerprint == expected:
        return code
    actual = code.fingerprint or "(none: the model names no code files)"
    raise RemoteCodeRefused(FIELD, f"the code of {model} is not the approved code, so none of it is run: approved "
                                   f"fingerprint {expected}, its code now {actual}; {_changes(expected, code)}. Review the "
                                   f"files and set {FIELD} to the new fingerprint to approve them, or restore the approved files")


def _changes(expected: str, code: RemoteCode) -> str:
    approved = _remembered(expected)
    if approved is None:
        listing = ", ".join(f"{name} (sha256 {digest})" for name, digest in sorted(code.files.items())) or "none"
        return f"files now: {listing}"
    names = sorted(set(approved) | set(code.files))
    changed = [n for n in names if n in approved and n in code.files and approved[n] != code.files[n]]
    added = [n for n in names if n not in approved]
    removed = [n for n in names if n not in code.files]
    parts = [f"{label}: {', '.join(found)}" for label, found in (("changed", changed), ("added", added), ("removed", removed))
             if found]
    return "files that differ — " + "; ".join(parts)


def _store(fingerprint: str) -> Any:
    return paths.home() / "remote_code" / f"{fingerprint}.json"


def _remember(code: RemoteCode) -> None:
    try:
        target = _store(code.fingerprint)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(code.files, sort_keys=True))
    except OSError:
        pass  # remembering only sharpens a later refusal's wording; the check itself does not need it


def _remembered(fingerprint: str) -> dict[str, str] | None:
    try:
        files = json.loads(_store(fingerprint).read_text())
    except (OSError, ValueError):
        return None
    return files if isinstance(files, dict) else None


def check_run_model(config: Mapping[str, Any], weights: str | None = None) -> None:
    """Export, chat and eval of a stored run check again before loading: the base model's
    code must still be the approved code, and a full run's saved `weights` folder (which
    holds the copies transformers saved) may hold only those approved files, unchanged."""
    code = check_approved(config)
    if code is None or not config.get(FIELD) or weights is None:
        return
    try:
        saved = read_remote_code(weights)
    except RemoteCodeUnavailable as exc:
        raise RemoteCodeRefused(FIELD, f"the code saved with the run cannot be checked, so none of it is run: {exc}") from None
    differ = sorted(name for name, digest in saved.files.items() if code.files.get(name) != digest)
    if differ:
        raise RemoteCodeRefused(FIELD, f"{weights} holds code files that are not the approved ones ({', '.join(differ)}), so "
                                       f"none of it is run; restore them from the approved model ({config.get('model_name')})")


def code_summary(model: str, trust_remote_code: bool) -> dict[str, Any]:
    """What the dataset preview and memory estimate show of the model's code, read from a
    local folder or the local hub cache only (they never wait on the network): the files,
    their fingerprint, and a note where there is nothing to approve or it cannot be read."""
    try:
        code = current_code(model, download=False)
    except RemoteCodeUnavailable as exc:
        return {"fingerprint": None, "files": [], "note": f"the model's code files cannot be read here: {exc}"}
    if code.fingerprint is None:
        return {**code.as_dict(), "note": no_code_note(code) if trust_remote_code else "the model names no code of its own"}
    return {**code.as_dict(), "note": f"review these files; {FIELD}: {code.fingerprint} approves exactly them"}
