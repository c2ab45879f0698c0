"""The `export_after` run setting and its checks (called by config/run_config.py).

`export_after: merged` (or `adapter`) asks the torch worker to export the run right after
it saved the final model, in the same process (`worker/export_after.py`), instead of a
second `tunelab export` process that imports torch, transformers and PEFT again. The
result is what `tunelab export RUN --format <same>` writes, into the same default folder
`<run folder>/export-<format>`. Only what can be told without torch is refused here; the
rest (an embedding model found by its files, a quantised base) is refused by the export
planner in the worker, and reported in the run's message without failing the run.
Torch-free, like config/run_config.py.
"""

from __future__ import annotations

from typing import Any

# The formats the worker exports itself: both need nothing beyond what training imported.
# GGUF needs llama.cpp's tools and can take minutes; it stays a separate `tunelab export`.
EXPORT_AFTER_FORMATS = ("merged", "adapter")
# The data shapes only embedding models train on (worker/embedding_formats.EMBEDDING_FORMATS):
# such a run's folder already is a sentence-transformers model with nothing to merge.
EMBEDDING_SHAPES = ("pairs", "triplets", "scored_pairs", "labelled_pairs")
EXPORT_AFTER_HELP = ("merged | adapter; empty: no export. Export the run as soon as it completes, in the training process (no second "
                     "process importing torch again): merged writes base + adapter folded into one model (a full run: its "
                     "weights), in the run's half type, into <run folder>/export-merged, as `tunelab export RUN --format merged` "
                     "would; adapter copies the adapter into export-adapter. Not after a stop or cancel. A failed export leaves "
                     "the run completed and says why in its message. GGUF: use `tunelab export` afterwards.")


def export_after_format(value: str | None) -> str | None:
    """The setting normalised (`MERGED ` -> merged, empty -> None), or a ValueError naming the fix."""
    if value is None or not value.strip():
        return None
    name = value.strip().lower()
    if name in ("gguf", "gguf-adapter"):
        raise ValueError(f"{name} is not exported inside the training process (it needs llama.cpp's tools); set "
                         f"export_after to merged or adapter, or leave it out and run `tunelab export RUN --format {name}` "
                         "once the run completes")
    if name not in EXPORT_AFTER_FORMATS:
        raise ValueError(f"{value!r} is not a format the run can export when it completes; use one of "
                         f"{', '.join(EXPORT_AFTER_FORMATS)}, or leave export_after out")
    return name


def export_after_errors(cfg: Any) -> list[tuple[str, str]]:
    """What the export planner would refuse for this run anyway, refused before it trains."""
    fmt = cfg.export_after
    if fmt is None:
        return []
    if cfg.resolved_backend == "mlx":
        return [("export_after", "the mlx backend does not export when the run completes; leave export_after out and run "
                                 "`tunelab export RUN --format adapter` afterwards, or use backend=torch")]
    if fmt == "adapter" and not cfg.uses_adapter:
        return [("export_after", f"training_type={cfg.training_type} trains every weight, so the run has no adapter to export; "
                                 "set export_after=merged (the weights in the run's half type) or leave it out")]
    if cfg.format in EMBEDDING_SHAPES:
        return [("export_after", f"format={cfg.format} trains an embedding model, whose run folder already is a sentence-transformers "
                                 "model (an adapter merged in) that SentenceTransformer(path) loads; leave export_after out")]
    return []
