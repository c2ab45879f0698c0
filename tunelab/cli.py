"""The `tunelab` command line: serve, train, resume, runs, show, token, fields, demo.

Bad input exits with code 2 and a message naming the field — never a traceback.
Heavy libraries are never imported here; training happens in a child process.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tunelab import paths
from tunelab.config import ConfigError, RunConfig, load_config_file
from tunelab.foreground import EXIT_BAD_CONFIG, EXIT_ERROR, print_outcome, watch_run
from tunelab.paths import PathNotAllowed

app = typer.Typer(add_completion=False, no_args_is_help=True, help="tunelab: a local fine-tuning lab for LLMs.")
console = Console()
err_console = Console(stderr=True)

SPARK_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    values = [v for v in values or [] if v is not None]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK_BARS[min(7, int((v - low) / span * 7.999))] for v in values)


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else ""


def _fail(code: int, message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/] {message}")
    return typer.Exit(code)


def _config_failure(exc: ConfigError) -> typer.Exit:
    for err in exc.errors:
        err_console.print(f"[red]config error[/] [bold]{err.field}[/]: {err.message}")
    return typer.Exit(EXIT_BAD_CONFIG)


def _orchestrator():
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    return Orchestrator(Store(paths.db_path()))


def _start_and_watch(orchestrator, start) -> int:
    """Start a run via `start()` and follow it in the foreground; returns the exit code."""
    from tunelab.orchestrator import NotResumable, RunActive

    try:
        run_id = start()
    except ConfigError as exc:
        raise _config_failure(exc)
    except PathNotAllowed as exc:
        raise _fail(EXIT_BAD_CONFIG, f"{exc.field}: {exc}")
    except (RunActive, NotResumable) as exc:
        raise _fail(EXIT_ERROR, str(exc))
    outcome = watch_run(orchestrator, run_id, console)
    print_outcome(outcome, console)
    orchestrator.shutdown()
    return outcome.exit_code


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML or JSON run config."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: --set learning_rate=1e-4 (repeatable)."),
) -> None:
    """Train in the foreground. Ctrl-C stops and saves; a second Ctrl-C cancels."""
    try:
        cfg = load_config_file(config, set_)
    except ConfigError as exc:
        raise _config_failure(exc)
    orchestrator = _orchestrator()
    raise typer.Exit(_start_and_watch(orchestrator, lambda: orchestrator.start(cfg)))


@app.command()
def resume(run: int = typer.Argument(..., help="Run id (see `tunelab runs`).")) -> None:
    """Continue an `error` or unfinished `stopped` run from its last valid checkpoint."""
    orchestrator = _orchestrator()
    raise typer.Exit(_start_and_watch(orchestrator, lambda: orchestrator.resume(run)))


@app.command()
def runs(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    limit: int = typer.Option(50, min=1, max=10_000),
    offset: int = typer.Option(0, min=0),
) -> None:
    """List recorded runs, newest first."""
    from tunelab.store import Store

    rows = Store(paths.db_path()).list_runs(limit=limit, offset=offset)
    if as_json:
        print(json.dumps(rows, indent=1, default=str))
        return
    table = Table("id", "status", "name", "model", "dataset", "steps", "final loss", "loss", "started")
    for r in rows:
        loss = f"{r['final_loss']:.4f}" if r.get("final_loss") is not None else ""
        table.add_row(str(r["id"]), r["status"], r.get("display_name") or "", r["model_name"], r.get("dataset_name") or "",
                      f"{r.get('final_step') or 0}/{r.get('total_steps') or '?'}", loss, sparkline(r.get("loss_sparkline")),
                      _when(r.get("started_at")))
    console.print(table)


@app.command()
def show(run: int = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """One run: status, config, final loss, loss sparkline and output folder."""
    from tunelab.store import Store

    store = Store(paths.db_path())
    row = store.get_run(run)
    if row is None:
        raise _fail(EXIT_ERROR, f"no run {run}; see `tunelab runs`")
    if as_json:
        print(json.dumps({**row, "metrics": store.get_metrics(run)}, indent=1, default=str))
        return
    console.print(f"[bold]run {row['id']}[/] {row.get('display_name') or ''}  status: [bold]{row['status']}[/]")
    console.print(f"  started: {_when(row.get('started_at'))}  ended: {_when(row.get('ended_at'))}")
    for key in ("model_name", "dataset_name", "duration_seconds", "final_step", "total_steps", "final_loss",
                "output_dir", "error_message"):
        if row.get(key) not in (None, ""):
            console.print(f"  {key}: {row[key]}")
    console.print(f"  loss: {sparkline(row.get('loss_sparkline'))}")
    config = row.get("config") or {}
    console.print("  config: " + json.dumps(config, default=str))


@app.command()
def export(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    format_: str = typer.Option("adapter", "--format", help="adapter | merged | gguf."),
    dest: Optional[str] = typer.Option(None, "--dest", help="Folder inside the outputs root (a relative path starts there). "
                                                            "Default: <run folder>/export-<format>."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float16 | bfloat16 | float32 (default: the run's training half type, bf16 runs bfloat16, else float16); for merged and gguf."),
) -> None:
    """Export a completed (or stopped-with-checkpoint) run: its adapter, merged weights, or GGUF."""
    from tunelab.export import ExportFailed, ExportInputError, ExportRefused, export_run
    from tunelab.store import Store

    try:
        with console.status(f"exporting run {run} as {format_}…"):
            result = export_run(Store(paths.db_path()), run, format_, dest=dest, dtype=dtype)
    except (ExportInputError, PathNotAllowed) as exc:
        raise _fail(EXIT_BAD_CONFIG, f"--{exc.field}: {exc}")
    except (ExportRefused, ExportFailed) as exc:
        raise _fail(EXIT_ERROR, str(exc))
    plan = result.plan
    origin = f"checkpoint of step {plan.step}" if plan.step is not None else "final weights"
    console.print(f"exported run {run}'s {origin} as {plan.format}{f' ({plan.dtype})' if plan.dtype else ''} to {plan.dest}")
    for name in result.files:
        console.print(f"  {name}")


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind; anything but loopback prints a warning."),
    port: int = typer.Option(8765, min=1, max=65535),
) -> None:
    """Serve the web page and the REST/SSE API."""
    from tunelab.server.main import serve as run_server

    run_server(host=host, port=port)


@app.command()
def token() -> None:
    """Print the API token (created on first use)."""
    from tunelab.server.auth import load_or_create_token

    print(load_or_create_token())


@app.command()
def fields() -> None:
    """Every run setting with its default and meaning."""
    table = Table("field", "default", "meaning")
    for name, info in RunConfig.model_fields.items():
        default = "required" if info.is_required() else repr(info.get_default(call_default_factory=True))
        table.add_row(name, default, info.description or "")
    console.print(table)


@app.command()
def demo(
    backend: str = typer.Option("torch", help="torch or mlx."),
    steps: int = typer.Option(60, min=1, help="Training steps."),
) -> None:
    """Fine-tune the built-in tiny Llama on the sample data, offline, end to end."""
    from tunelab.demo import demo_config, ensure_demo_assets, print_demo_summary

    console.print("preparing the demo model and data (built once, then cached)…")
    assets = ensure_demo_assets()
    try:
        cfg = demo_config(assets, backend=backend, steps=steps)
    except ConfigError as exc:
        raise _config_failure(exc)
    orchestrator = _orchestrator()
    try:
        run_id = orchestrator.start(cfg)
    except ConfigError as exc:
        raise _config_failure(exc)
    outcome = watch_run(orchestrator, run_id, console)
    orchestrator.shutdown()
    print_demo_summary(outcome, console)
    raise typer.Exit(outcome.exit_code)


def main() -> None:  # pragma: no cover - console-script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
