"""Pushing a run to the Hugging Face Hub: its export (adapter, merged or GGUF, written
first when the run has none of that format), a generated model card and the loss plot,
in one commit to `owner/name`.

`push_run(store, run_id, repo_id, token, fmt=..., private=...)` is the one entry point,
used by `tunelab push` and `POST /api/runs/{id}/push`. `checks` refuses bad input before
any network call, `source` finds or makes the export, `card` writes the README.md and
plot, `upload` speaks to the Hub through huggingface_hub. The token is used for the
calls and dropped: never stored, logged or written into the card.
"""

from tunelab.push.checks import FORMATS, PushError, check_repo_id, check_token
from tunelab.push.run import PushResult, push_run

__all__ = ["FORMATS", "PushError", "PushResult", "check_repo_id", "check_token", "push_run"]
