"""Who wrote a folder that a request names, so nobody writes into another owner's files.

A run's `output_dir` and an export's `dest` are folders a caller chooses. The rule: a new
run or export may write into a folder only when nothing there belongs to a run of
another owner, and a folder that already holds files only when the requester (the run
itself, or a run of the same owner) wrote them. What was written by whom comes from the
store: each run's folder (its owner on the run's row) and each export folder
(`run_exports`). Files no run recorded — a user's own, a deleted run's — belong to no
one who may overwrite them. Owners are API key names; the home's token and the CLI are
the owner "local" (NULL in the store), one owner between them.

`foreign_writer` answers with a description of the first writer that is not the
requester's ("run 2's export (owner 'alice')"), or None; the callers turn it into their
own refusal (an export's ExportError, the server's 409).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab import paths


@dataclass(frozen=True)
class Writer:
    """One recorded writer of a folder that touches the one asked about."""

    run_id: int
    owner: str | None
    folder: str  # resolved
    what: str  # "folder" or "export"

    def describe(self) -> str:
        return f"run {self.run_id}'s {self.what} {self.folder} ({owner_words(self.owner)})"


def owner_words(owner: str | None) -> str:
    return f"owner {owner!r}" if owner else "owner 'local': the server's token or the CLI"


def writers_touching(store: Any, folder: str | Path) -> list[Writer]:
    """Every recorded run folder and export folder that is `folder`, lies in it or holds it."""
    found = []
    for run_id in store.runs_sharing_output_dir(folder):
        run = store.get_run(run_id)
        if run is not None and run.get("output_dir"):
            found.append(Writer(run_id, run.get("owner"), os.path.realpath(run["output_dir"]), "folder"))
    found += [Writer(row["run_id"], row["owner"], row["folder"], "export") for row in store.exports_touching(folder)]
    return found


def holds_files(folder: str | Path) -> bool:
    try:
        return Path(folder).is_dir() and any(Path(folder).iterdir())
    except OSError:
        return True  # unreadable: whatever is there is not known to be ours


def foreign_writer(store: Any, folder: str | Path, *, run_id: int | None, owner: str | None,
                   own_contents: bool = False) -> str | None:
    """Why the requester — run `run_id` (None: a run not made yet) of `owner` — may not
    write into `folder`, or None when it may. `own_contents`: the caller knows by other
    means that what the folder holds is the requester's (an earlier export of the run,
    which says so in its manifest)."""
    target = os.path.realpath(folder)
    writers = writers_touching(store, target)
    for writer in writers:
        if writer.run_id != run_id and writer.owner != owner:
            return writer.describe()
    if own_contents or not holds_files(target):
        return None
    # The folder's files are the requester's only if a writer of its own is the folder or holds it.
    if any(w.folder == target or target.startswith(w.folder + os.sep) for w in writers):
        return None
    return f"files that no run of {owner_words(owner)} wrote"


def own_exports(store: Any, run_id: int) -> list[str]:
    """The export folders recorded as `run_id`'s that a delete of its files may remove:
    still there, inside the outputs root, and holding or lying in no other run's folder or export."""
    root = paths.outputs_root()
    mine = []
    for row in store.exports_of_run(run_id):
        folder = row["folder"]
        if not paths.is_dir(folder) or not paths.is_within(folder, root) or paths.is_within(root, folder):
            continue
        if all(w.run_id == run_id for w in writers_touching(store, folder)):
            mine.append(folder)
    return mine
