"""`tunelab export RUN --download`: have a server export a run, and bring the files here.

The server is the one `--server URL` (or TUNELAB_SERVER) names, else the one running on
this home (`<home>/server.json`); the token is TUNELAB_TOKEN, else the home's token file,
as for `tunelab train`. An export of the run that the server already holds is used when
it is what was asked for (same format, and the same dtype and quant where those were
given; its manifest says), newest first; otherwise, or with `--dest`, the server exports
(POST /api/runs/{id}/export, which blocks until the files are written). Each file of the
export then comes through `resumable_download`, into `--to DIR` (default
`./run-<id>-<export folder>`), with the export's folder layout.

Who may download is the server's rule (an export's owner or an admin): a refusal is
printed as the server words it. Only httpx and rich are imported: the CLI stays quick.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import httpx
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from tunelab import paths
from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR
from tunelab.export.plan import MANIFEST
from tunelab.cli.remote_run import find_server, read_token
from tunelab.cli.resumable_download import DownloadError, download
from tunelab.text import printable

SERVER_ENV = "TUNELAB_SERVER"
# An export (a merge, a GGUF conversion) is written before the POST answers.
EXPORT_TIMEOUT_S = 3600.0
READ_TIMEOUT_S = 60.0


class RemoteExportError(Exception):
    """The export or a download failed; `exit_code` is the CLI's answer (2: bad input)."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Wanted:
    run: int
    format: str
    dest: str | None = None
    dtype: str | None = None
    quant: str | None = None


def server_url(option: str | None) -> str:
    """The server to talk to: `option` (--server or TUNELAB_SERVER), else this home's."""
    if option and option.strip():
        return option.strip().rstrip("/")
    server = find_server(lambda line: None)
    if server is None:
        raise RemoteExportError(EXIT_BAD_CONFIG, f"--download needs a tunelab server: pass --server URL (or set {SERVER_ENV}), "
                                                 "or start `tunelab serve` on this home; without --download the export is "
                                                 "written here, on this machine")
    return server.url


def export_and_download(url: str, wanted: Wanted, to: Path | None, console: Console) -> tuple[Path, list[str]]:
    """Export `wanted` on the server at `url` (or reuse its export) and download every file
    into `to`; returns the folder and the files' relative paths. Raises RemoteExportError."""
    token = read_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=10.0)
    with httpx.Client(base_url=url, headers=headers, timeout=timeout) as client:
        try:
            export = _existing_export(client, wanted) if wanted.dest is None else None
            if export is None:
                export = _new_export(client, wanted, console)
            else:
                _say(console, f"using the {export['format']} export the server holds in {export['folder']} "
                              "(pass --dest to export again)")
            folder = to or Path.cwd() / f"run-{wanted.run}-{paths.slug(PurePosixPath(export['folder']).name)}"
            return folder, _download_all(client, wanted.run, export, folder, console)
        except httpx.TransportError as exc:
            raise RemoteExportError(EXIT_ERROR, f"the server at {url} did not answer ({exc}); is it running, and is "
                                                f"--server (or {SERVER_ENV}) right?") from None


def _existing_export(client: httpx.Client, wanted: Wanted) -> dict[str, Any] | None:
    """The newest export of the run on the server that is what `wanted` asks for, or None."""
    for export in reversed(_exports(client, wanted.run)):
        if export["format"] != wanted.format or not any(f["path"] == MANIFEST for f in export["files"]):
            continue
        manifest = client.get(_download_path(wanted.run), params={"folder": export["folder"], "file": MANIFEST})
        if manifest.status_code != 200:
            raise _refused(manifest, f"download run {wanted.run}'s export")
        facts = json.loads(manifest.content)
        if facts.get("quant") == wanted.quant and wanted.dtype in (None, facts.get("dtype")):
            return export
    return None


def _new_export(client: httpx.Client, wanted: Wanted, console: Console) -> dict[str, Any]:
    body = {key: value for key, value in (("format", wanted.format), ("dest", wanted.dest), ("dtype", wanted.dtype),
                                          ("quant", wanted.quant)) if value is not None}
    with console.status(f"the server exports run {wanted.run} as {wanted.format}…"):
        answer = client.post(f"/api/runs/{wanted.run}/export", json=body, timeout=httpx.Timeout(EXPORT_TIMEOUT_S, connect=10.0))
    if answer.status_code != 200:
        raise _refused(answer, f"export run {wanted.run}")
    done = answer.json()
    _say(console, f"the server exported run {wanted.run} as {done['format']} to {done['dest']}")
    for export in _exports(client, wanted.run):
        if export["folder"] == done["dest"]:
            return export
    # The listing names folders with symlinks resolved; the answer names the one asked for.
    newest = [e for e in _exports(client, wanted.run) if e["format"] == done["format"]]
    if not newest:
        raise RemoteExportError(EXIT_ERROR, f"the server exported run {wanted.run} to {done['dest']} but does not list it "
                                            f"among the run's exports (GET /api/runs/{wanted.run}/exports)")
    return max(newest, key=lambda e: e["created_at"])


def _exports(client: httpx.Client, run: int) -> list[dict[str, Any]]:
    answer = client.get(f"/api/runs/{run}/exports")
    if answer.status_code != 200:
        raise _refused(answer, f"list run {run}'s exports")
    return answer.json()["exports"]


def _download_all(client: httpx.Client, run: int, export: dict[str, Any], folder: Path, console: Console) -> list[str]:
    files = export["files"]
    targets = [(f, _local_path(folder, f["path"])) for f in files]
    _say(console, f"downloading {len(files)} file(s), {sum(f['size_bytes'] for f in files)} bytes, into {folder}")
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        for file, target in targets:
            task = progress.add_task(file["path"], total=file["size_bytes"])
            try:
                how = download(client, _download_path(run), {"folder": export["folder"], "file": file["path"]}, target,
                               file["size_bytes"], on_bytes=_advance(progress, task))
            except DownloadError as exc:
                if exc.status is not None:
                    raise _refused_text(exc.status, str(exc), f"download run {run}'s export") from None
                raise RemoteExportError(EXIT_ERROR, str(exc)) from None
            progress.remove_task(task)
            _say(console, f"  {file['path']} ({file['size_bytes']} bytes, {how})")
    return [f["path"] for f in files]


def _say(console: Console, text: str) -> None:
    """A line of what the server said: printed as text, never read as markup."""
    console.print(printable(text), markup=False, highlight=False)


def _advance(progress: Progress, task: Any) -> Callable[[int], None]:
    return lambda n: progress.advance(task, n)


def _local_path(folder: Path, relative: str) -> Path:
    """Where the export's file `relative` (a '/'-separated path the server sent) goes:
    inside `folder`, whatever the name says."""
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or any(p in ("", ".", "..") or os.sep in p for p in parts):
        raise RemoteExportError(EXIT_ERROR, f"the server listed a file {paths.shown(relative)} that would land outside {folder}; "
                                            "nothing was written for it")
    target = folder.joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not paths.is_within(target.parent, folder):
        raise RemoteExportError(EXIT_ERROR, f"{target.parent} leads out of {folder} (a symlink?); download into an empty folder")
    return target


def _download_path(run: int) -> str:
    return f"/api/runs/{run}/exports/download"


def _refused(response: httpx.Response, what: str) -> RemoteExportError:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    message = error.get("message") or f"HTTP {response.status_code}"
    if error.get("field"):
        message = f"--{error['field']}: {message}"
    return _refused_text(response.status_code, message, what)


def _refused_text(status: int, message: str, what: str) -> RemoteExportError:
    if status == 401:
        return RemoteExportError(EXIT_ERROR, f"the server refused the API token; set TUNELAB_TOKEN to a key it knows ({message})")
    code = EXIT_BAD_CONFIG if status == 422 else EXIT_ERROR
    return RemoteExportError(code, f"the server would not {what} (HTTP {status}): {message}")
