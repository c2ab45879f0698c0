"""Exporting a finished run: its LoRA adapter, merged weights in a chosen dtype, or GGUF
(float or quantised, with an Ollama Modelfile).

`export_run(store, run_id, fmt, dest=None, dtype=None, quant=None) -> ExportResult` is the one entry
point, used by `tunelab export` and `POST /api/runs/{id}/export`. Deciding what to
export (`plan`) and copying an adapter happen in the caller's process; merging and GGUF
writing import torch, so they run in a child process (`child`). Exports write only
inside the outputs root; each export folder carries a `tunelab-export.json` manifest.
"""

from tunelab.export.plan import (
    DTYPES,
    FORMATS,
    QUANTS,
    ExportError,
    ExportFailed,
    ExportInputError,
    ExportPlan,
    ExportRefused,
    FolderNotOwned,
    plan_export,
)
from tunelab.export.run import ExportResult, export_run

__all__ = ["DTYPES", "FORMATS", "ExportError", "ExportFailed", "ExportInputError", "ExportPlan", "ExportRefused",
           "ExportResult", "FolderNotOwned", "QUANTS", "export_run", "plan_export"]
