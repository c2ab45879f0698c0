"""What a push asks for, checked before anything touches the network: the repo id, the
token and the format, and the one error type every push failure is told with.

A repo id is `owner/name` as the Hub spells it (huggingface_hub's own `validate_repo_id`
rules, with the owner required: a bare name would land in whatever account the token
belongs to, which the user did not say). The token is only checked for presence here;
whether the Hub takes it is the first network call (`upload.check_token`).
"""

from __future__ import annotations

import re

FORMATS = ("adapter", "merged", "gguf")
# The Hub's limit on a repo id, owner and name together.
MAX_REPO_ID = 96
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")


class PushError(Exception):
    """A push that did not happen, and why. `field` names the input at fault (repo_id,
    token, format), if any; `kind` says who can fix it: `input` (the caller: CLI exit 2,
    HTTP 422), `not_found` (no such run: exit 1, HTTP 404), `refused` (the Hub says no:
    exit 1, HTTP 409), `offline` (this process was told to stay off the Hub, HF_HUB_OFFLINE:
    exit 1, HTTP 409), `failed` (the Hub failed or cannot be reached: exit 1, HTTP 502)."""

    def __init__(self, message: str, *, field: str | None = None, kind: str = "input", status: int | None = None):
        self.field = field
        self.kind = kind
        self.status = status
        super().__init__(message)


def check_repo_id(repo_id: str) -> str:
    """`repo_id` stripped, or PushError(field=repo_id) saying the rule."""
    text = (repo_id or "").strip()
    rule = ("a Hub repo id is owner/name, e.g. alice/my-lora: letters, digits, '-', '_' and '.', each part starting with "
            f"a letter or digit, no '--' or '..', not ending in .git, at most {MAX_REPO_ID} characters")
    if not _REPO_ID.fullmatch(text) or len(text) > MAX_REPO_ID or "--" in text or ".." in text or text.endswith(".git"):
        shown = text if len(text) <= 60 else text[:60] + "…"
        raise PushError(f"{shown!r} is not a repo id: {rule}", field="repo_id")
    return text


def check_token(token: str | None, where: str) -> str:
    """`token` stripped, or PushError(field=token) saying `where` one comes from."""
    text = (token or "").strip()
    if not text:
        raise PushError(f"pushing needs a Hugging Face access token with write access; {where}", field="token")
    if any(c.isspace() for c in text) or not text.isprintable():
        raise PushError("the token holds spaces or control characters; paste it again from "
                        "https://huggingface.co/settings/tokens", field="token")
    return text


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise PushError(f"{fmt!r} is not a format tunelab pushes; use one of {', '.join(FORMATS)}", field="format")
    return fmt
