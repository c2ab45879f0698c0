"""Using a finished or stopped run from the terminal: `tunelab chat`, `tunelab speak` and
`tunelab eval` (docs/INFERENCE.md). Each imports its inference code inside itself."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tunelab.cli.output import console
from tunelab.cli.output import fail as _fail
from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR


def chat_command(
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


def speak_command(
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


def evaluate_command(
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
