"""`tunelab push RUN REPO_ID`: a run's export, model card and loss plot to the Hugging Face Hub.

Registered on the main command line by `tunelab.cli.main`; kept here so that file does not grow.
The push runs in this process on this home's store (as `tunelab export` does), and
writes the export first when the run has none of the format. The token comes from
`--token` or `HF_TOKEN` and is never stored. Bad input exits 2 naming the option; a
refusal or failure (the Hub's or the export's) exits 1.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR
from tunelab.cli.lazy_console import LazyConsole
from tunelab.text import printable

console = LazyConsole()
OPTION_OF = {"repo_id": "REPO_ID", "token": "--token (or HF_TOKEN)", "format": "--format", "dest": "--dest",
             "dtype": "--dtype", "quant": "--quant"}


def _fail(code: int, field: str | None, message: str) -> typer.Exit:
    where = f"{OPTION_OF.get(field, field)}: " if field else ""
    print(f"error: {where}{printable(message, keep_lines=True)}", file=sys.stderr)
    return typer.Exit(code)


def push_command(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    repo_id: str = typer.Argument(..., metavar="REPO_ID", help="The Hub repo to push to, owner/name (created if it does not exist)."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (an existing repo keeps its visibility)."),
    format_: str = typer.Option("adapter", "--format", help="adapter | merged | gguf: which export to push (written first if the run has none)."),
    token: Optional[str] = typer.Option(None, "--token", help="A Hugging Face token with write access (default: HF_TOKEN; "
                                                              "prefer the variable, a command line is visible to other users)."),
) -> None:
    """Push a run's export to the Hugging Face Hub with a generated model card (base model,
    data, settings, final metrics, loss plot), all in one commit. See docs/EXPORT.md."""
    from tunelab.export import ExportFailed, ExportInputError, ExportRefused, FolderNotOwned
    from tunelab.paths import PathNotAllowed
    from tunelab.push import PushError, push_run
    from tunelab.store import Store

    try:
        with Store() as store, console.status(f"pushing run {run} to {repo_id}…") as status:
            result = push_run(store, run, repo_id, token or os.environ.get("HF_TOKEN"), fmt=format_, private=private,
                              token_hint="set HF_TOKEN or pass --token", say=lambda line: status.update(printable(line)))
    except PushError as exc:
        raise _fail(EXIT_BAD_CONFIG if exc.kind == "input" else EXIT_ERROR, exc.field, str(exc))
    except (ExportInputError, PathNotAllowed) as exc:
        raise _fail(EXIT_BAD_CONFIG, exc.field, str(exc))
    except (FolderNotOwned, ExportRefused, ExportFailed) as exc:
        raise _fail(EXIT_ERROR, getattr(exc, "field", None), str(exc))
    made = "exported and pushed" if result.exported_now else "pushed"
    console.print(f"{made} run {run}'s {result.format} export to {result.repo_url}"
                  f" ({'new ' + ('private ' if private else 'public ') + 'repo' if result.created else 'existing repo'})", markup=False)
    for name in result.files:
        console.print(f"  {printable(name)}", markup=False)
