"""`tunelab export RUN`: a run's adapter, merged weights or GGUF on this machine, or with
`--download` exported by a server and downloaded here (tunelab/cli/remote_export.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tunelab.cli.output import console
from tunelab.cli.output import escaped as _escaped
from tunelab.cli.output import fail as _fail
from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR
from tunelab.paths import PathNotAllowed


def export_command(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    format_: str = typer.Option("adapter", "--format", help="adapter | merged | gguf | gguf-adapter (a LoRA adapter as a llama.cpp GGUF)."),
    dest: Optional[str] = typer.Option(None, "--dest", help="Folder inside the outputs root (a relative path starts there). "
                                                            "Default: <run folder>/export-<format> (a resumed run: <run folder>/run-<id>-export-<format>)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float16 | bfloat16 | float32 (default: the run's training half type, bf16 runs bfloat16, else float16); for merged and gguf."),
    quant: Optional[str] = typer.Option(None, "--quant", help="gguf only: q8_0 | q4_k_m | q5_k_m | q6_k (llama.cpp's quantisations); default: a float GGUF in --dtype."),
    download: bool = typer.Option(False, "--download", help="Have the server export the run (or use its export of that kind) "
                                                            "and download the files here; a cut download continues when run again."),
    to: Optional[Path] = typer.Option(None, "--to", help="With --download: the folder to download into. Default: ./run-<RUN>-<export folder>."),
    server: Optional[str] = typer.Option(None, "--server", envvar="TUNELAB_SERVER", metavar="URL",
                                         help="With --download: the server's URL (default: the server running on this home). "
                                              "The token is TUNELAB_TOKEN."),
) -> None:
    """Export a completed (or stopped-with-checkpoint) run: its adapter, merged weights, or GGUF
    (with an Ollama Modelfile). See docs/EXPORT.md. With --download, a server exports it
    and the files come to this machine."""
    if download:
        raise typer.Exit(_export_and_download(run, format_, dest, dtype, quant, to, server))
    if to is not None:
        raise _fail(EXIT_BAD_CONFIG, "--to: names where --download puts the files; add --download, or use --dest for the "
                                     "export folder on this machine")
    from tunelab.export import ExportFailed, ExportInputError, ExportRefused, FolderNotOwned, export_run
    from tunelab.store import Store

    try:
        with console.status(f"exporting run {run} as {format_}…"):
            result = export_run(Store(), run, format_, dest=dest, dtype=dtype, quant=quant)
    except (ExportInputError, PathNotAllowed) as exc:
        raise _fail(EXIT_BAD_CONFIG, f"--{exc.field}: {exc}")
    except FolderNotOwned as exc:
        raise _fail(EXIT_ERROR, f"--{exc.field}: {exc}")
    except (ExportRefused, ExportFailed) as exc:
        raise _fail(EXIT_ERROR, str(exc))
    plan = result.plan
    origin = f"checkpoint of step {plan.step}" if plan.step is not None else "final weights"
    console.print(f"exported run {run}'s {origin} as {plan.format}{f' ({plan.quant or plan.dtype})' if plan.dtype else ''} to {plan.dest}")
    for name in result.files:
        console.print(f"  {name}")


def _export_and_download(run: int, format_: str, dest: Optional[str], dtype: Optional[str], quant: Optional[str],
                         to: Optional[Path], server: Optional[str]) -> int:
    from tunelab.cli.remote_export import RemoteExportError, Wanted, export_and_download, server_url

    try:
        folder, files = export_and_download(server_url(server), Wanted(run, format_, dest, dtype, quant), to, console.real())
    except RemoteExportError as exc:
        raise _fail(exc.exit_code, str(exc))
    console.print(f"downloaded run {run}'s export ({len(files)} file(s)) into {_escaped(folder)}")
    return 0
