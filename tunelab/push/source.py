"""The export a push uploads: the run's newest export of the format (as the store's
`run_exports` records it), or a new one written by the export code when there is none.

Only plain files inside the export folder travel, symlinks resolved and checked as the
download routes check them (`paths.is_within`). The folder's `tunelab-export.json`
manifest stays home: it names folders of this machine (source, dest), which a public
repo has no business showing; the model card says what it would (format, dtype, step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tunelab import paths
from tunelab.export.plan import MANIFEST


@dataclass(frozen=True)
class ExportFolder:
    folder: Path
    format: str
    manifest: dict[str, Any]
    made_now: bool  # written by this push (no export of the format existed)

    def files(self) -> list[str]:
        """Paths relative to the folder ('/'-separated) of the files to upload, sorted."""
        found = []
        for file in sorted(self.folder.rglob("*")):
            if file.is_file() and paths.is_within(file, self.folder) and file.relative_to(self.folder).as_posix() != MANIFEST:
                found.append(file.relative_to(self.folder).as_posix())
        return found


def recorded_export(store: Any, run_id: int, fmt: str) -> ExportFolder | None:
    """The newest recorded export of `fmt` that is still a complete export folder."""
    for row in reversed(store.exports_of_run(run_id)):
        folder = Path(row["folder"])
        if row["format"] == fmt and paths.is_dir(folder) and (folder / MANIFEST).is_file():
            return ExportFolder(folder, fmt, _manifest(folder), made_now=False)
    return None


def export_for_push(store: Any, run_id: int, fmt: str, export: Callable[[], Any]) -> ExportFolder:
    """The export to push: a recorded one, else what `export()` (the caller's export_run,
    under whatever lock it holds) writes now. Export errors pass through as they are."""
    found = recorded_export(store, run_id, fmt)
    if found is not None:
        return found
    result = export()
    return ExportFolder(result.plan.dest, fmt, _manifest(result.plan.dest), made_now=True)


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
