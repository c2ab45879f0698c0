"""The Hub side of a push, through huggingface_hub: check the token, create the repo,
upload every file in one commit, and take a new repo away again if that commit fails.

All files go in ONE commit (`create_commit` with every operation): the Hub applies a
commit whole or not at all, so a failure leaves no repo content half-written. Large
files are uploaded (LFS or Xet) before that commit and stay invisible unless it lands.
A repo this push created is deleted again when the commit fails, so a refused push
leaves nothing behind; an existing repo is left exactly as it was.

The Hub's address comes from huggingface_hub (`HF_ENDPOINT`, default huggingface.co).
The token is passed explicitly to each call, never saved (`huggingface_hub.login` is not
used, and no token file is read), and is cut out of every message that leaves here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tunelab.orchestrator.plots import redact
from tunelab.push.checks import PushError

log = logging.getLogger("tunelab.push")


@dataclass(frozen=True)
class Upload:
    """One file of the commit: its path in the repo, and its bytes or the file holding them."""

    path_in_repo: str
    content: bytes | Path


@dataclass(frozen=True)
class Pushed:
    repo_url: str
    commit_url: str
    created: bool  # the push created the repo (False: it added a commit to an existing one)


class HubSession:
    """huggingface_hub's client, with the token and with failures told as PushErrors."""

    def __init__(self, token: str):
        from huggingface_hub import HfApi, constants
        from huggingface_hub.utils import disable_progress_bars

        if constants.HF_HUB_OFFLINE:
            raise PushError("HF_HUB_OFFLINE is set for this process, so it may not reach the Hub; unset it (for the "
                            "server: restart it without it) to push", kind="offline")

        # Its tqdm bars would write over the CLI's status line and fill the server's log.
        disable_progress_bars()
        self.token = token
        self.api = HfApi(token=token)

    @property
    def endpoint(self) -> str:
        return self.api.endpoint

    def check_token(self, repo_id: str) -> str:
        """The token's user name, once the Hub has accepted the token and it may write
        into the repo's owner (the user or one of their organisations)."""
        who = self._call(lambda: self.api.whoami(token=self.token), "token", "checking the token")
        role = ((who.get("auth") or {}).get("accessToken") or {}).get("role")
        if role == "read":
            raise PushError("this token can only read; create one with write access at "
                            "https://huggingface.co/settings/tokens", field="token")
        owner = repo_id.split("/", 1)[0]
        spaces = {who.get("name")} | {org.get("name") for org in who.get("orgs") or [] if isinstance(org, dict)}
        if owner not in spaces:
            raise PushError(f"the token belongs to {who.get('name')!r}, who cannot create repos under {owner!r}; use "
                            f"{who.get('name')}/NAME or one of their organisations", field="repo_id")
        return str(who.get("name"))

    def push(self, repo_id: str, private: bool, uploads: list[Upload], message: str) -> Pushed:
        from huggingface_hub import CommitOperationAdd
        from huggingface_hub.errors import HfHubHTTPError

        try:
            url = self.api.create_repo(repo_id, private=private, exist_ok=False, token=self.token)
            created = True
        except HfHubHTTPError as exc:
            if exc.response is None or exc.response.status_code != 409:
                raise self._failure(exc, "repo_id", f"creating {repo_id}") from None
            url, created = f"{self.endpoint}/{repo_id}", False  # it exists: the commit goes on top
        except Exception as exc:  # noqa: BLE001 - network failures of every library below
            raise self._failure(exc, "repo_id", f"creating {repo_id}") from None
        operations = [CommitOperationAdd(path_in_repo=u.path_in_repo, path_or_fileobj=u.content) for u in uploads]
        try:
            commit = self.api.create_commit(repo_id, operations, commit_message=message, token=self.token)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the new repo goes
            failure = self._failure(exc, "repo_id", f"uploading to {repo_id}")
            if created:
                self._take_back(repo_id)
            raise failure from None
        return Pushed(repo_url=str(url), commit_url=commit.commit_url, created=created)

    def _take_back(self, repo_id: str) -> None:
        try:
            self.api.delete_repo(repo_id, token=self.token, missing_ok=True)
        except Exception as exc:  # noqa: BLE001 - said, not hidden: the repo may be left empty
            log.warning("could not delete the empty repo %s after a failed push: %s", repo_id, self._said(exc))

    def _call(self, work: Callable[[], Any], field: str, doing: str) -> Any:
        try:
            return work()
        except Exception as exc:  # noqa: BLE001
            raise self._failure(exc, field, doing) from None

    def _failure(self, exc: Exception, field: str, doing: str) -> PushError:
        """A PushError for a failed Hub call: 401 is the token's fault, 403/404 the repo
        id's (no right to it), another 4xx the request's, the rest the Hub's or the network's."""
        from huggingface_hub.errors import HfHubHTTPError

        said = self._said(exc)
        response = getattr(exc, "response", None) if isinstance(exc, HfHubHTTPError) else None
        status = getattr(response, "status_code", None)
        if status == 401:
            return PushError(f"the Hub at {self.endpoint} refused the token ({said}); check it, or create a token with "
                             "write access at https://huggingface.co/settings/tokens", field="token", status=status)
        if status in (403, 404):
            return PushError(f"the Hub refused {doing}: {said}; the token may not write there (check the repo id's "
                             "owner and the token's permissions)", field=field, kind="refused", status=status)
        if status is not None and 400 <= status < 500:
            return PushError(f"the Hub refused {doing}: {said}", field=field, kind="refused", status=status)
        if status is not None:
            return PushError(f"the Hub failed {doing} ({status}): {said}; try again later", kind="failed", status=status)
        if _unreachable(exc):
            return PushError(f"{doing} failed: cannot reach the Hub at {self.endpoint} ({said})", kind="failed")
        return PushError(f"{doing} failed: {type(exc).__name__}: {said}", kind="failed")

    def _said(self, exc: Exception) -> str:
        text = getattr(exc, "server_message", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return redact(str(text), [self.token])[:300]


def _unreachable(exc: Exception) -> bool:
    """A failure to reach the Hub at all: the socket's, or the HTTP client's transport
    error (httpx's or its fork's, whichever huggingface_hub brings, hence the name)."""
    return isinstance(exc, OSError) or any(cls.__name__ == "TransportError" for cls in type(exc).__mro__)
