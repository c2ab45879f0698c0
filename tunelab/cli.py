"""The `tunelab` command line: serve, train, sweep, resume, runs, show, export, push, chat, speak, eval, fingerprint, token, fields, demo.

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

from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR
from tunelab.keys_cli import keys_app
from tunelab.lazy_console import LazyConsole
from tunelab.node_flags import node_flags
from tunelab.push_cli import push_command
from tunelab.paths import PathNotAllowed
from tunelab.queue_cli import queue_app
from tunelab.text import printable

if TYPE_CHECKING:
    from tunelab.config import ConfigError, RunConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, help="tunelab: a local fine-tuning lab for LLMs.")
app.add_typer(keys_app, name="keys")
app.add_typer(queue_app, name="queue")
app.command("push")(push_command)
# Handed to other modules as console.real(): rich's own code needs the Console itself.
console = LazyConsole()
err_console = LazyConsole(stderr=True)


def _escaped(text: object) -> str:
    """`text` printable and safe inside rich markup."""
    from rich.markup import escape

    return escape(printable(text))


def _fail(code: int, message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/] {_escaped(message)}")
    return typer.Exit(code)


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
    from tunelab.config import ConfigError
    from tunelab.foreground import print_outcome, watch_run
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
    from tunelab.remote_run import find_server

    return find_server(lambda line: console.print(f"[dim]{_escaped(line)}[/]"))


def _submit_and_watch(server, submit) -> int:
    """Start a run on `server` via `submit(remote)` and follow it; returns the exit code."""
    from tunelab.config import ConfigError
    from tunelab.foreground import print_outcome
    from tunelab.remote_run import RemoteRefused, submit_and_follow

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
    from tunelab.config import ConfigError
    from tunelab.config_files import load_config_file

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
    from tunelab.worker_node import run_worker_node

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
    from tunelab.runs_view import listed_runs, runs_table
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
    from tunelab.resume_chain import describe as describe_chain, earlier_runs
    from tunelab.runs_view import sparkline, when as _when
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


@app.command()
def export(
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
    from tunelab.remote_export import RemoteExportError, Wanted, export_and_download, server_url

    try:
        folder, files = export_and_download(server_url(server), Wanted(run, format_, dest, dtype, quant), to, console.real())
    except RemoteExportError as exc:
        raise _fail(exc.exit_code, str(exc))
    console.print(f"downloaded run {run}'s export ({len(files)} file(s)) into {_escaped(folder)}")
    return 0


@app.command()
def chat(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Chat with checkpoint-N of the run instead of its final weights."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt at the start of the conversation."),
    temperature: float = typer.Option(0.7, "--temperature", help="0 (greedy) to 2."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling, above 0 and at most 1."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Longest answer, in tokens (at most 4096)."),
    compare: bool = typer.Option(False, "--compare", help="Answer every message with the base model, then the fine-tune."),
) -> None:
    """Chat with a finished or stopped run in the terminal (lines from stdin, answers streamed).
    See docs/INFERENCE.md."""
    from pydantic import ValidationError

    from tunelab.inference.chat_cli import run_chat
    from tunelab.inference.settings import Sampling
    from tunelab.inference.target import InferenceError

    try:
        sampling = Sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "options"
        raise _fail(EXIT_BAD_CONFIG, f"{option}: {first['msg']}")
    try:
        run_chat(run, checkpoint, system, sampling, compare)
    except InferenceError as exc:
        code = EXIT_BAD_CONFIG if exc.field else EXIT_ERROR
        raise _fail(code, f"--{exc.field}: {exc}" if exc.field else str(exc))


@app.command()
def speak(
    run: int = typer.Argument(..., help="Run id of a text-to-speech run (see `tunelab runs`)."),
    text: str = typer.Argument(..., help="The words to speak."),
    out: Path = typer.Option(Path("speech.wav"), "-o", "--out", help="The wav file to write."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Speak with checkpoint-N of the run instead of its final weights."),
    max_new_tokens: int = typer.Option(1200, "--max-new-tokens", help="Longest speech, in audio tokens (Orpheus: 7 a codec frame; Sesame CSM: its frames; at most 4096)."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 (greedy) to 2."),
) -> None:
    """Speak TEXT with a finished or stopped text-to-speech run into a wav file (the TTS
    counterpart of chat). See docs/INFERENCE.md."""
    from pydantic import ValidationError

    from tunelab.inference.speak import SpeakOptions, speak_run
    from tunelab.inference.target import InferenceError
    from tunelab.store import Store

    try:
        options = SpeakOptions(text=text, checkpoint=checkpoint, max_new_tokens=max_new_tokens, temperature=temperature)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "options"
        raise _fail(EXIT_BAD_CONFIG, f"{'TEXT' if option == '--text' else option}: {first['msg']}")
    if not out.parent.is_dir():
        raise _fail(EXIT_BAD_CONFIG, f"--out: the folder {out.parent} does not exist; create it or write elsewhere")
    try:
        with Store() as store, console.status(f"speaking with run {run}…"):
            wav = speak_run(store, run, options)
    except InferenceError as exc:
        option = "TEXT" if exc.field == "text" else f"--{exc.field}"
        raise _fail(EXIT_BAD_CONFIG if exc.field else EXIT_ERROR, f"{option}: {exc}" if exc.field else str(exc))
    out.write_bytes(wav)
    console.print(f"wrote {out}")


@app.command("eval")
def eval_(
    run: int = typer.Argument(..., help="Run id (see `tunelab runs`)."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Evaluate checkpoint-N of the run instead of its final weights."),
    perplexity: bool = typer.Option(True, "--perplexity/--no-perplexity", help="Loss and perplexity of base and fine-tune on the run's eval split."),
    generations: bool = typer.Option(True, "--generations/--no-generations", help="Answers of base and fine-tune to a prompt set."),
    prompts: Optional[str] = typer.Option(None, "--prompts", help="Prompt set: .jsonl/.json (strings or {\"messages\": [...]}) or .txt (a prompt a line). Default: the eval split's first rows."),
    max_prompts: int = typer.Option(5, "--max-prompts", help="How many prompts (1-50)."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Longest answer per prompt, in tokens (1-1024, greedy)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="lm-eval tasks, comma-separated (needs `pip install 'tunelab[eval]'`)."),
    task_path: Optional[str] = typer.Option(None, "--task-path", help="Folder of local lm-eval task YAML files (offline tasks)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="lm-eval: at most N examples per task."),
    show: bool = typer.Option(False, "--show", help="Print the run's stored evaluations instead of running one."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Evaluate a finished or stopped run against its base and store the results with it. See docs/INFERENCE.md."""
    from tunelab.evaluate.cli_eval import eval_command

    raise typer.Exit(eval_command(run, dict(checkpoint=checkpoint, perplexity=perplexity, generations=generations,
                                            prompts_file=prompts, max_prompts=max_prompts, max_new_tokens=max_new_tokens,
                                            tasks=[t for t in (tasks or "").split(",") if t.strip()], task_path=task_path,
                                            limit=limit), show, as_json, console.real(), _fail))


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
    from tunelab.remote_code_cli import fingerprint_command

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

    from tunelab.config import RunConfig

    table = Table("field", "default", "meaning")
    for name, info in RunConfig.model_fields.items():
        default = "required" if info.is_required() else repr(info.get_default(call_default_factory=True))
        table.add_row(name, default, info.description or "")
    console.print(table)


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
    tts_family: str = typer.Option("orpheus", help="The tts demo's model: orpheus (a tiny Orpheus-style Llama with a SNAC codec) "
                                                  "or csm (a tiny Sesame CSM with its Mimi codec inside)."),
    sweep_file: Optional[Path] = typer.Option(None, "--sweep-file", help="Train nothing: write the demo's hyperparameter sweep "
                                              "(8 trials over learning rate and LoRA rank) to this file, to run with `tunelab sweep FILE`."),
) -> None:
    """Fine-tune a built-in tiny model on generated sample data, offline, end to end."""
    from tunelab.config import ConfigError

    if sweep_file is not None:
        from tunelab.demo import ensure_demo_assets
        from tunelab.demo_sweep import write_demo_sweep

        console.print("preparing the demo model and data (built once, then cached)…")
        written = write_demo_sweep(sweep_file, ensure_demo_assets())
        console.print(f"wrote {written}; run it with: tunelab sweep {written}", soft_wrap=True, markup=False, highlight=False)
        raise typer.Exit(0)
    from tunelab.demo import print_demo_summary
    from tunelab.demo_cli import demo_rewards, demo_run_config, print_demo_evals
    from tunelab.foreground import watch_run

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
    print_demo_evals(outcome, modality, console.real())
    raise typer.Exit(outcome.exit_code)


def main() -> None:  # pragma: no cover - console-script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
