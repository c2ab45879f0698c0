"""`push_run`: one run's export, its model card and loss plot, to a Hub repo in one commit.

The order keeps a refused push cheap and clean: the repo id, format and token are
checked before any network call; the Hub is asked whether it takes the token (and lets
it write under the repo's owner) before an export is written; the repo is created only
then, and all files go in one commit, which either lands whole or leaves nothing
(`upload`). Export errors (`tunelab.export`) pass through unchanged for the surfaces to
tell as their export commands do.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable

from tunelab.push.card import PLOT_NAME, loss_plot, model_card
from tunelab.push.checks import PushError, check_format, check_repo_id, check_token
from tunelab.push.source import export_for_push
from tunelab.push.upload import HubSession, Upload

log = logging.getLogger("tunelab.push")
CARD_NAME = "README.md"


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    repo_url: str
    commit_url: str
    created: bool         # a new repo (False: a commit on top of an existing one)
    private: bool         # as asked; an existing repo keeps its own visibility
    format: str
    export_folder: str
    exported_now: bool    # no export of the format existed, so the push wrote one
    files: list[str]      # every path the commit wrote, the card and the plot included

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def push_run(store: Any, run_id: int, repo_id: str, token: str | None, *, fmt: str = "adapter", private: bool = False,
             token_hint: str = "pass one", export: Callable[[], Any] | None = None,
             say: Callable[[str], None] = lambda line: None) -> PushResult:
    """Push run `run_id`'s `fmt` export to `repo_id`. `export()` writes the export when the
    run has none of that format (default: `tunelab.export.export_run`); `token_hint`
    says where a missing token comes from; `say` hears each stage. Raises PushError, or
    an ExportError when the export cannot be written."""
    repo_id = check_repo_id(repo_id)
    fmt = check_format(fmt)
    token = check_token(token, token_hint)
    run = store.get_run(run_id)
    if run is None:
        raise PushError(f"there is no run {run_id}; list runs with `tunelab runs` or GET /api/runs", kind="not_found")
    session = HubSession(token)
    say(f"checking the token with {session.endpoint}")
    user = session.check_token(repo_id)
    if export is None:
        from tunelab.export import export_run

        export = lambda: export_run(store, run_id, fmt)  # noqa: E731
    say(f"finding run {run_id}'s {fmt} export (writing one if there is none)")
    source = export_for_push(store, run_id, fmt, export)
    files = [name for name in source.files() if name not in (CARD_NAME, PLOT_NAME)]
    if not files:
        raise PushError(f"the export folder {source.folder} holds no files to push; export the run again", kind="failed")
    metrics = store.get_metrics(run_id)
    card = model_card(run, metrics, store.get_metric_extras(run_id), fmt, source.manifest, files)
    uploads = [Upload(name, source.folder / name) for name in files]
    uploads += [Upload(CARD_NAME, card.encode()), Upload(PLOT_NAME, loss_plot(run, metrics))]
    say(f"uploading {len(uploads)} files to {repo_id} as {user}")
    pushed = session.push(repo_id, private, uploads, f"Upload run {run_id} ({fmt}) from tunelab")
    log.info("pushed run %s (%s) to %s", run_id, fmt, repo_id)
    return PushResult(repo_id=repo_id, repo_url=pushed.repo_url, commit_url=pushed.commit_url, created=pushed.created,
                      private=private, format=fmt, export_folder=str(source.folder), exported_now=source.made_now,
                      files=sorted(u.path_in_repo for u in uploads))
