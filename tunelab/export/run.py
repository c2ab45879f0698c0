"""Carrying out an export plan: copy an adapter, or hand merging and GGUF writing to a
short-lived child process, then put the result in place.

The result is built in a hidden staging folder next to the destination and renamed into
place at the end, so the destination only ever holds a complete export (or the earlier
one, which it replaces). The heavy work runs in `python -m tunelab.export.child` so the
CLI and the server never import torch; the child reports through a small JSON file.
A training worker that has torch imported already (`export_after`) runs the same
`child.export` in its own process instead (`carry_out_in_process`): same files, same folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab import paths
from tunelab.export.codec import carry_codec
from tunelab.export.plan import MANIFEST, ExportError, ExportFailed, ExportInputError, ExportPlan, plan_export
from tunelab.folder_owners import foreign_writer

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "adapters.safetensors")
# What a tokenizer (or a vision-language model's processor, which holds one) may have been
# saved as; whichever of these the run folder holds travels along.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "processor_config.json", "preprocessor_config.json")
# The last lines of a crashed child's stderr are enough to say what went wrong.
STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class ExportResult:
    plan: ExportPlan
    files: list[str]

    def describe(self) -> dict[str, Any]:
        plan = self.plan
        return {"run_id": plan.run_id, "format": plan.format, "dtype": plan.dtype, "quant": plan.quant, "kind": plan.kind,
                "source": str(plan.source), "step": plan.step, "dest": str(plan.dest), "files": self.files}


def export_run(store: Any, run_id: int, fmt: str = "adapter", *, dest: str | None = None, dtype: str | None = None,
               quant: str | None = None) -> ExportResult:
    """Export run `run_id` from `store` (a tunelab.store.Store) as `fmt` into `dest`
    (default `<run folder>/export-<fmt>`); `quant` picks a GGUF quantisation (plan.QUANTS).
    Raises ExportError subclasses or PathNotAllowed. The folder is recorded in the store
    with the run and its owner (`tunelab.folder_owners`): no other owner's export or run
    may write there, and deleting the run with its files removes it."""
    run = store.get_run(run_id)
    owner = run.get("owner") if run else None

    def foreign(folder: Path, own_contents: bool) -> str | None:
        return foreign_writer(store, folder, run_id=run_id, owner=owner, own_contents=own_contents)

    plan = plan_export(run, run_id, fmt, dest, dtype, quant=quant, foreign_writer=foreign,
                       folder_owners=lambda folder: store.runs_sharing_output_dir(folder, except_run_id=run_id))
    result = _carried_out(plan, in_process=False)
    store.record_export(plan.dest, run_id, owner, plan.format)
    return result


def carry_out_in_process(plan: ExportPlan) -> ExportResult:
    """Carry out `plan` in this process, for a caller that has torch imported already (the
    training worker): the merge runs here, on the CPU, with the same code and result as the child."""
    return _carried_out(plan, in_process=True)


def _carried_out(plan: ExportPlan, in_process: bool) -> ExportResult:
    try:
        return _carry_out(plan, in_process)
    except OSError as exc:
        raise ExportFailed(f"exporting run {plan.run_id} into {plan.dest} failed: {exc.strerror or exc} ({exc.filename or plan.dest})") from exc


def _staging_folder(dest: Path) -> Path:
    """A fresh hidden folder beside `dest`; a destination that cannot be created is bad input."""
    # Not mkdtemp: its private 0700 mode would stay on the export after the rename.
    staging = dest.parent / f".export-partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise ExportInputError("dest", f"cannot create a folder at {dest}: {exc.strerror or exc}; choose another folder") from None
    return staging


def _carry_out(plan: ExportPlan, in_process: bool = False) -> ExportResult:
    staging = _staging_folder(plan.dest)
    try:
        if plan.format == "adapter":
            _copy_adapter(plan.source, staging)
            carry_codec(plan.source, staging)
        elif in_process:
            _run_here(plan, staging)
        else:
            _run_child(plan, staging)
        files = sorted(p.name for p in staging.iterdir())
        result = ExportResult(plan, files)
        (staging / MANIFEST).write_text(json.dumps({**result.describe(), "base_model": plan.base_model,
                                                    "created_at": time.time()}, indent=1))
        _move_into_place(staging, plan.dest)
        return result
    finally:
        paths.remove_inside(staging, plan.dest.parent)


def _copy_adapter(source: Path, staging: Path) -> None:
    # Symlinks are skipped: an export copies the run's own files, never what a link points at.
    weights = [name for name in ADAPTER_WEIGHTS if _real_file(source / name)]
    if not weights or not _real_file(source / "adapter_config.json"):
        raise ExportFailed(f"{source} lacks the adapter weights or adapter_config.json; the run's adapter was not saved completely")
    for name in (weights[0], "adapter_config.json", *TOKENIZER_FILES):
        if _real_file(source / name):
            shutil.copy2(source / name, staging / name)


def _real_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _request(plan: ExportPlan, staging: Path) -> dict[str, Any]:
    """What `child.export` is told: the plan, with the staging folder as its destination."""
    return {"format": plan.format, "kind": plan.kind, "source": str(plan.source), "base_model": plan.base_model,
            "trust_remote_code": plan.trust_remote_code, "dtype": plan.dtype, "quant": plan.quant, "dest": str(staging),
            "run_id": plan.run_id, "base_weights": str(plan.base_weights) if plan.base_weights else None}


def _run_here(plan: ExportPlan, staging: Path) -> None:
    """`child.export` in this process. The child's CUDA_VISIBLE_DEVICES="" cannot be had once
    torch is imported; `child` itself keeps everything on the CPU (PEFT is told torch_device=cpu)."""
    from tunelab.export import child

    try:
        child.export(_request(plan, staging))
    except (ExportError, OSError):
        raise  # already says what is wrong (an OSError: with its path, by the caller)
    except Exception as exc:  # noqa: BLE001 - the same message the child's answer would carry
        raise ExportFailed(f"exporting run {plan.run_id} as {plan.format} failed: {type(exc).__name__}: {exc}") from exc


def _run_child(plan: ExportPlan, staging: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="tunelab-export-") as scratch:
        result_file = Path(scratch) / "result.json"
        request = {**_request(plan, staging), "result": str(result_file)}
        request_file = Path(scratch) / "request.json"
        request_file.write_text(json.dumps(request))
        # The merge runs on the CPU; hiding the GPUs keeps libraries (PEFT loads adapter
        # weights onto cuda:0 when it can) off a GPU that a training run may be using.
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        done = subprocess.run([sys.executable, "-m", "tunelab.export.child", str(request_file)],
                              capture_output=True, text=True, env=env)
        answer = _read_answer(result_file)
    if done.returncode == 0 and answer.get("ok"):
        return
    if done.returncode < 0:  # killed: most often by the kernel for lack of memory
        message = f"the export process was killed by signal {-done.returncode} (out of memory?)"
    else:
        message = answer.get("error") or _stderr_tail(done.stderr) or f"the export process exited with code {done.returncode}"
    if answer.get("field"):
        raise ExportInputError(answer["field"], message)
    raise ExportFailed(f"exporting run {plan.run_id} as {plan.format} failed: {message}")


def _read_answer(result_file: Path) -> dict[str, Any]:
    try:
        answer = json.loads(result_file.read_text())
    except (OSError, ValueError):
        return {}  # the child died before answering; its stderr tells why
    return answer if isinstance(answer, dict) else {}


def _stderr_tail(stderr: str) -> str:
    lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
    return "\n".join(lines[-5:])[-STDERR_TAIL_CHARS:]


def _move_into_place(staging: Path, dest: Path) -> None:
    """Replace `dest` (absent, empty, or an earlier export) with the staged folder."""
    if dest.exists():
        if any(dest.iterdir()) and not (dest / MANIFEST).is_file():
            raise ExportInputError("dest", f"{dest} filled with other files during the export; choose a new folder")
        paths.remove_inside(dest, dest.parent)
    os.rename(staging, dest)
