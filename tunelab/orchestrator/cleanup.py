"""Clean-up after a cancelled run: remove partial `tmp-checkpoint-N` saves.

Only folders that really lie inside the outputs root are removed, a symlink is never
followed (a link named like a partial save is left alone, and links inside a removed
folder are unlinked, not chased), and finished `checkpoint-N` folders are kept.
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
