"""Clean-up at a run's end: a cancelled run's folder goes (or at least its partial saves);
a completed run's dataset caches go.

A cancel keeps nothing, so the run's whole folder is removed — when it lies inside the
outputs root and no other run uses it (a resumed run shares its parent's folder). Where
the folder must stay, only partial `tmp-checkpoint-N` saves are removed and finished
`checkpoint-N` folders are kept. A symlink is never followed (a link named like a partial
save is left alone, and links inside a removed folder are unlinked, not chased).
A distributed run's config for its ranks (it holds secrets) goes whatever the outcome.
The dataset caches (Arrow copies, tokenized rows) are kept while a run can still be
resumed, where they save the tokenizing; a completed run will not read them again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tunelab import paths
from tunelab.checkpoints import PARTIAL_NAME

log = logging.getLogger("tunelab.orchestrator")


def remove_partial_checkpoints(output_dir: str | Path | None) -> list[Path]:
    """Delete `tmp-checkpoint-N` folders directly inside `output_dir`; return what went."""
    if not output_dir:
        return []
    folder = Path(output_dir)
    if folder.is_symlink() or not paths.is_within(folder, paths.outputs_root()):
        log.info("not cleaning %s: it is not a folder inside the outputs root", folder)
        return []
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if not PARTIAL_NAME.fullmatch(entry.name):
            continue
        try:
            if paths.remove_inside(entry.path):
                removed.append(Path(entry.path))
        except OSError as exc:
            log.warning("could not remove the partial save %s: %s", entry.path, exc)
    return removed


def discard_cancelled_output(output_dir: str | Path | None, sharing: list[int] | None) -> str:
    """Remove a cancelled run's folder where allowed; return what happened, for its history.
    `sharing`: the other runs whose folders overlap this one; None when that is unknown."""
    if not output_dir or not os.path.lexists(output_dir):
        return "cancelled; nothing was kept"
    folder = Path(output_dir)
    if sharing is None or sharing:
        remove_partial_checkpoints(folder)
        who = f"shared with run(s) {', '.join(map(str, sharing))}" if sharing else "perhaps used by another run"
        return f"cancelled; its folder {folder} is {who}, so it was kept (partial saves removed)"
    try:
        if paths.remove_inside(folder):
            return f"cancelled; its folder {folder} was removed"
    except OSError as exc:
        log.warning("could not remove the cancelled run's folder %s: %s", folder, exc)
        return f"cancelled; its folder {folder} could not be removed ({exc.strerror}); delete it yourself"
    return f"cancelled; its folder {folder} is outside the outputs root, so it was left on disk; delete it yourself"


def remove_rank_config(output_dir: str | Path | None) -> None:
    """Delete a distributed run's config for its ranks: it holds the run's secrets."""
    if not output_dir:
        return
    try:
        paths.run_rank_config(output_dir).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove the ranks' config of %s: %s", output_dir, exc)


def remove_dataset_caches(output_dir: str | Path | None) -> bool:
    """Delete a finished run's `datasets` caches (inside its folder, inside the outputs root)."""
    if not output_dir:
        return False
    try:
        return paths.remove_inside(paths.run_datasets_cache(output_dir))
    except OSError as exc:
        log.warning("could not remove the dataset caches of %s: %s", output_dir, exc)
        return False
