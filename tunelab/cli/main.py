"""The `tunelab` command line: serve, train, sweep, resume, runs, show, export, push, chat, speak, eval, fingerprint, token, fields, demo.
export (export_cli), chat, speak and eval (model_use_cli), push (push_cli), keys and queue
are defined in modules of their own and registered here; all print through cli_output.

Bad input exits with code 2 and a message naming the field — never a traceback.
Heavy libraries are never imported here; training happens in a child process.
Each command imports what it alone uses (rich, the config, the orchestrator, httpx) inside
itself: every command pays for this module's imports, and `tunelab serve` must answer soon
after its launch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from tunelab import families
from tunelab.cli.output import console, err_console
from tunelab.cli.output import escaped as _escaped
from tunelab.cli.output import fail as _fail
from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR
from tunelab.cli.export import export_command
from tunelab.cli.keys import keys_app
from tunelab.cli.model_use import chat_command, evaluate_command, speak_command
from tunelab.cli.node_flags import node_flags
from tunelab.paths import PathNotAllowed
from tunelab.cli.push import push_command
from tunelab.cli.queue import queue_app
from tunelab.text import printable

if TYPE_CHECKING:
    from tunelab.config.run_config import ConfigError, RunConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, help="tunelab: a local fine-tuning lab for LLMs.")
app.add_typer(keys_app, name="keys")
app.add_typer(queue_app, name="queue")
app.command("push")(push_command)
def _config_failure(exc: ConfigError) -> typer.Exit:
    for err in exc.errors:
        err_console.print(f"[red]config error[/] [bold]{_escaped(err.field)}[/]: {_escaped(err.message)}")
    return typer.Exit(EXIT_BAD_CONFIG)


def _orchestrator():
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    # The CLI trains its own run now or refuses; the queue is the server's to run.
    return Orchestrator(Store(), queueing=False)


def _start_and_watch(orchestrator, start) -> int:
    """Start a run via `start()` and follow it in the foreground; returns the exit code."""
    from tunelab.config.run_config import ConfigError
    from tunelab.cli.foreground import print_outcome, watch_run
    from tunelab.orchestrator import NotResumable, RunActive

    try:
        run_id = start()
    except ConfigError as exc:
        raise _config_failure(exc)
    except PathNotAllowed as exc:
        raise _fail(EXIT_BAD_CONFIG, f"{exc.field}: {exc}")
    except (RunActive, NotResumable) as exc:
        raise _fail(EXIT_ERROR, str(exc))
    outcome = watch_run(orchestrator, run_id, console.real())
    print_outcome(outcome, console.real())
    orchestrator.shutdown()
    return outcome.exit_code


def _server_for(local: bool):
    """The server on this home to hand the run to, or None to train in this process."""
    if local:
        return None
    from tunelab.cli.remote_run import find_server

    return find_server(lambda line: console.print(f"[dim]{_escaped(line)}[/]"))


def _submit_and_watch(server, submit) -> int:
    """Start a run on `server` via `submit(remote)` and follow it; returns the exit code."""
    from tunelab.config.run_config import ConfigError
    from tunelab.cli.foreground import print_outcome
    from tunelab.cli.remote_run import RemoteRefused, submit_and_follow

    try:
        outcome = submit_and_follow(server, console.real(), submit)
    except ConfigError as exc:
        raise _config_failure(exc)
    except RemoteRefused as exc:
        raise _fail(exc.exit_code, str(exc))
    print_outcome(outcome, console.real())
    return outcome.exit_code


LOCAL_HELP = "Train in this process even when a tunelab server runs on this home."


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML or JSON run config."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: --set learning_rate=1e-4 (repeatable)."),
    local: bool = typer.Option(False, "--local", help=LOCAL_HELP),
    num_gpus: Optional[int] = typer.Option(None, "--num-gpus", help="Train data-parallel on this many GPUs (sets num_gpus)."),
    num_processes: Optional[int] = typer.Option(None, "--num-processes", help="Training processes per node (sets num_processes)."),
    nnodes: Optional[int] = typer.Option(None, "--nnodes", help="Machines taking part (torchrun --nnodes); run the same command on each."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="This machine's rank; 0 is the head, which records the run."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", help="The head's address (torchrun --master-addr)."),
    master_port: Optional[int] = typer.Option(None, "--master-port", help="The head's rendezvous port (default 29500)."),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="host:port of the head's rendezvous, instead of --master-addr/--master-port."),
    join_timeout: Optional[float] = typer.Option(None, "--join-timeout", help="Seconds the nodes wait for each other (default 300)."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="Train on the Ray cluster at ADDRESS (host:port or auto); sets ray_address."),
    export: Optional[str] = typer.Option(None, "--export", metavar="FORMAT", help="Export the run as it completes, in the training process: merged or adapter (sets export_after)."),
) -> None:
    """Train in the foreground. Ctrl-C stops and saves; a second Ctrl-C cancels. With a
    server running on this home, the run goes to it (its warm worker starts at once).
    With --nnodes, run the same command on every machine with its own --node-rank."""
    from tunelab.config.run_config import ConfigError
    from tunelab.config.files import load_config_file

    flags = node_flags(num_gpus=num_gpus, num_processes=num_processes, nnodes=nnodes, node_rank=node_rank,
                       master_addr=master_addr, master_port=master_port, rdzv_endpoint=rdzv_endpoint,
                       join_timeout=join_timeout)
    try:
        cfg = load_config_file(config, set_ + flags + ([f"ray_address={json.dumps(ray)}"] if ray else [])
                               + ([f"export_after={json.dumps(export)}"] if export is not None else []))
    except ConfigError as exc:
        raise _config_failure(exc)
    if cfg.nodes is not None and cfg.nodes.node_rank > 0:
        raise typer.Exit(_train_as_worker_node(cfg))
    server = _server_for(local)
    if server is not None:
        raise typer.Exit(_submit_and_watch(server, lambda remote: remote.start(cfg)))
    orchestrator = _orchestrator()
    raise typer.Exit(_start_and_watch(orchestrator, lambda: orchestrator.start(cfg)))


def _train_as_worker_node(cfg: RunConfig) -> int:
    from tunelab.cli.worker_node import run_worker_node

    from tunelab.layout import DistTimeoutError, NodeDevicesError

    try:
        code = run_worker_node(cfg, lambda line: console.print(f"[dim]{_escaped(line)}[/]"))
    except PathNotAllowed as exc:
        raise _fail(EXIT_BAD_CONFIG, f"{exc.field}: {exc}")
    except (DistTimeoutError, NodeDevicesError) as exc:
        raise _fail(EXIT_BAD_CONFIG, str(exc))
    if code != 0:
        err_console.print(f"[red]this node's training processes ended with code {code}[/]; the head node's run says why")
    return EXIT_ERROR if code else 0


@app.command()
def sweep(
    target: str = typer.Argument(..., metavar="FILE|show", help="A sweep file to run, or `show`."),
    sweep_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="With `show`: the sweep's id or name."),
) -> None:
    """Search hyperparameters: run the sweep FILE (Optuna; every trial an ordinary run) in
    this process, or `tunelab sweep show ID` for its trials and best run. Running the same
    file again resumes the sweep."""
    from tunelab.sweeps.cli import run_sweep, show_sweep

    if target == "show":
        if not sweep_id:
            raise _fail(EXIT_BAD_CONFIG, "sweep show needs a sweep id or name: tunelab sweep show ID")
        raise typer.Exit(show_sweep(sweep_id, console.real(), err_console.real()))
    raise typer.Exit(run_sweep(Path(target), console.real(), err_console.real()))


@app.command()
def resume(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    local: bool = typer.Option(False, "--local", help=LOCAL_HELP),
) -> None:
    """Continue an `error` or unfinished `stopped` run from its last valid checkpoint
    (on the home's server when one runs, like `train`).

    Secrets are never stored: a run that used one needs it again in the environment
    (HF_TOKEN, WANDB_API_KEY, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN)."""
    server = _server_for(local)
    if server is not None:
        raise typer.Exit(_submit_and_watch(server, lambda remote: remote.resume(run)))
    orchestrator = _orchestrator()
    raise typer.Exit(_start_and_watch(orchestrator, lambda: orchestrator.resume(run)))


@app.command()
def runs(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    wide: bool = typer.Option(False, "--wide", help="Every column: name, model and dataset apart, and the loss sparkline."),
    limit: int = typer.Option(50, min=1, max=10_000),
    offset: int = typer.Option(0, min=0),
) -> None:
    """List recorded runs: queued ones first (with their queue position and priority), then
    the rest, newest first; each with its owner (the API key that started it)."""
    from tunelab.cli.runs_view import listed_runs, runs_table
    from tunelab.store import Store

    rows = listed_runs(Store(), limit=limit, offset=offset)
    if as_json:
        print(json.dumps(rows, indent=1, default=str))
        return
    console.print(runs_table(rows, wide, console.width))


@app.command()
def show(run: int = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """One run: status, config, final loss, loss sparkline, the last value of each extra metric and output folder."""
    from rich.text import Text

    from tunelab.layout import recorded_world_size, strategy_for
    from tunelab.orchestrator.resume_chain import describe as describe_chain, earlier_runs
    from tunelab.cli.runs_view import sparkline, when as _when
    from tunelab.store import Store

    from tunelab.store.sweeps import trial_of_run

    store = Store()
    row = store.get_run(run)
    if row is None:
        raise _fail(EXIT_ERROR, f"no run {run}; see `tunelab runs`")
    trial = trial_of_run(store, run)
    if as_json:
        print(json.dumps({**row, "sweep_trial": trial, "metrics": store.get_metrics(run),
                          "extra_metrics": store.get_metric_extras(run)}, indent=1, default=str))
        return
    # Stored text may predate today's input rules: print it escaped and never as markup.
    console.print(Text.assemble(("run " + str(row["id"]), "bold"), " ", printable(row.get("display_name")),
                                "  status: ", (printable(row["status"]), "bold")))
    console.print(f"  started: {_when(row.get('started_at'))}  ended: {_when(row.get('ended_at'))}")
    for key in ("model_name", "dataset_name", "modality", "duration_seconds", "final_step", "total_steps", "final_loss",
                "output_dir", "error_message"):
        if row.get(key) not in (None, ""):
            console.print(Text(f"  {key}: {printable(row[key], keep_lines=key == 'error_message')}"))
    lineage = describe_chain(row, earlier_runs(store, row))
    if lineage:  # its curve begins in the runs it continues
        console.print(Text(f"  {lineage}"))
    if row.get("resumed_by_run_id") is not None:
        console.print(f"  resumed as: run {row['resumed_by_run_id']}")
    if trial is not None:  # a pruned trial's run ends `stopped`: this says why
        console.print(Text(f"  sweep: {printable(trial['sweep'])} ({trial['sweep_id']}), trial {trial['trial']}, {trial['state']}"))
    console.print(f"  loss: {sparkline(row.get('loss_sparkline'))}")
    extras = store.get_metric_extras(run)
    if extras:
        console.print("  last values of the other metrics:")
        for name, series in extras.items():
            console.print(f"    {name}: {series['values'][-1]:.6g} (step {series['steps'][-1]})")
    config = row.get("config") or {}
    world = recorded_world_size(config)
    if world > 1:
        console.print(f"  world size: {world} ({strategy_for(config, world)})")
    # json.dumps escapes every control character (ensure_ascii), bidi ones included.
    console.print(Text("  config: " + json.dumps(config, default=str)))


# Commands that live in modules of their own, listed here in the order `--help` shows them.
app.command("export")(export_command)
app.command("chat")(chat_command)
app.command("speak")(speak_command)
app.command("eval")(evaluate_command)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind; anything but loopback prints a warning."),
    port: int = typer.Option(8765, min=1, max=65535),
    allow_remote_code: bool = typer.Option(False, "--allow-remote-code",
                                           help="Let API callers set trust_remote_code with approved_remote_code_fingerprint "
                                                "(runs that code from the model's repository, and only that)."),
    allow_unpinned_remote_code: bool = typer.Option(False, "--allow-unpinned-remote-code",
                                                    help="Also without approved_remote_code_fingerprint (runs whatever code "
                                                         "the model holds when it loads)."),
    allow_output_anywhere: bool = typer.Option(False, "--allow-output-anywhere",
                                               help="Let API callers set allow_output_outside_root (write outside the outputs root)."),
    allow_ray: bool = typer.Option(False, "--allow-ray", help="Let API callers set ray_address (sends the run's config, secrets included, to a Ray cluster)."),
    allow_multi_node: bool = typer.Option(False, "--allow-multi-node", help="Let API callers set nodes (opens torchrun's unauthenticated rendezvous port to the network)."),
    allow_reward_code: bool = typer.Option(False, "--allow-reward-code", help="Let API callers name a python reward file inside the data roots (objective grpo; runs that code in the worker)."),
    allow_image_urls: bool = typer.Option(False, "--allow-image-urls",
                                          help="Let runs download images their data names by http(s) URL (the server then "
                                               "fetches addresses its clients choose)."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", metavar="NAME",
                                           help="Also answer to this Host name (repeatable; '*' answers to any)."),
    max_queued_per_key: Optional[int] = typer.Option(None, "--max-queued-per-key", metavar="N",
                                                     help="How many queued runs one key may have waiting (default: TUNELAB_MAX_QUEUED_PER_KEY, else 20)."),
) -> None:
    """Serve the web page and the REST/SSE API."""
    from tunelab.server.main import serve as run_server

    run_server(host=host, port=port, allow_remote_code=allow_remote_code, allow_unpinned_remote_code=allow_unpinned_remote_code,
               allow_output_anywhere=allow_output_anywhere,
               allow_ray=allow_ray, allow_multi_node=allow_multi_node, allow_reward_code=allow_reward_code,
               allow_image_urls=allow_image_urls, allowed_hosts=allowed_host, max_queued_per_key=max_queued_per_key)


@app.command()
def fingerprint(
    model: str = typer.Argument(..., help="Hub id or local model folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the files and the fingerprint as JSON."),
) -> None:
    """Print a model's own code files and the approved_remote_code_fingerprint that approves exactly them."""
    from tunelab.cli.remote_code import fingerprint_command

    raise typer.Exit(fingerprint_command(model, as_json, _fail))


@app.command()
def token() -> None:
    """Print the API token (created on first use)."""
    from tunelab.server.auth import load_or_create_token

    print(load_or_create_token())


@app.command()
def fields() -> None:
    """Every run setting with its default and meaning."""
    from rich.table import Table

    from tunelab.config.run_config import RunConfig

    table = Table("field", "default", "meaning")
    for name, info in RunConfig.model_fields.items():
        default = "required" if info.is_required() else repr(info.get_default(call_default_factory=True))
        table.add_row(name, default, info.description or "")
    console.print(table)


# The tts demo models --tts-family chooses between, as their specs describe them.
_TTS_DEMOS = " or ".join(f"{spec.demo} ({spec.demo_words})" for spec in families.all() if spec.demo and spec.modality == "tts")


@app.command()
def demo(
    backend: str = typer.Option("torch", help="torch or mlx."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (default: the demo's own, 60; the speech demo's 250)."),
    modality: str = typer.Option("text", help="text (a tiny Llama on sample instructions), vision (a tiny LLaVA on images of coloured shapes), "
                                         "embedding (a tiny BERT-style encoder on query/passage pairs, with retrieval metrics) "
                                         "speech (a tiny Whisper on number words spoken by espeak-ng) or tts (a tiny Orpheus-style Llama with a tiny SNAC codec "
                                         "learning to speak the speech demo's clips, with a spoken sample per eval)."),
    method: str = typer.Option("sft", help="The text demo's objective: sft, or dpo, orpo, simpo, kto on generated preference pairs "
                                          "whose chosen answer follows a rule the rejected one breaks, or grpo on prompts with a "
                                          "checkable answer and built-in rewards."),
    tts_family: str = typer.Option("orpheus", help=f"The tts demo's model: {_TTS_DEMOS}."),
    sweep_file: Optional[Path] = typer.Option(None, "--sweep-file", help="Train nothing: write the demo's hyperparameter sweep "
                                              "(8 trials over learning rate and LoRA rank) to this file, to run with `tunelab sweep FILE`."),
) -> None:
    """Fine-tune a built-in tiny model on generated sample data, offline, end to end."""
    from tunelab.config.run_config import ConfigError

    if sweep_file is not None:
        from tunelab.demos.text import ensure_demo_assets
        from tunelab.demos.sweep import write_demo_sweep

        console.print("preparing the demo model and data (built once, then cached)…")
        written = write_demo_sweep(sweep_file, ensure_demo_assets())
        console.print(f"wrote {written}; run it with: tunelab sweep {written}", soft_wrap=True, markup=False, highlight=False)
        raise typer.Exit(0)
    from tunelab.demos.text import print_demo_summary
    from tunelab.cli.demo import demo_rewards, demo_run_config, print_demo_evals
    from tunelab.cli.foreground import watch_run

    try:
        cfg = demo_run_config(backend, steps, modality, method, tts_family, console.real())
    except ConfigError as exc:
        raise _config_failure(exc)
    orchestrator = _orchestrator()
    try:
        run_id = orchestrator.start(cfg)
    except ConfigError as exc:
        raise _config_failure(exc)
    outcome = watch_run(orchestrator, run_id, console.real())
    rewards = demo_rewards(method, orchestrator.store, run_id)
    orchestrator.shutdown()
    print_demo_summary(outcome, console.real(), rewards)
    print_demo_evals(outcome, modality, tts_family, console.real())
    raise typer.Exit(outcome.exit_code)


def main() -> None:  # pragma: no cover - console-script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
