"""Helpers shared by the model families' tests (vision, speech, audio chat, text-to-speech):
their conftests' helper folders and espeak-ng assets, and for the end-to-end runs an
orchestrator with an event recorder, stop-and-save once a run reaches a step, waiting for a
run's end, and the `tunelab` CLI in a child process (export, speak); the tiny text-to-speech
model and a finished run of it, for the tests that speak without training first."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

import pytest

if TYPE_CHECKING:
    from orch_helpers import EventRecorder

    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

RUN_WAIT_S = 300  # a few seconds of training on two idle cores; a loaded test machine is far slower
CLI_TIMEOUT_S = 240
# The end-to-end tests share the orchestrator tests' event recorder and the worker tests'
# spawned-worker driver.
HELPER_FOLDERS = ("orchestrator", "worker")
Assets = TypeVar("Assets")


def use_helper_folders() -> None:
    """Put the orchestrator and worker tests' helper modules on sys.path (for a conftest)."""
    for folder in HELPER_FOLDERS:
        sys.path.insert(0, str(Path(__file__).resolve().parent / folder))


def built_with_espeak(ensure: Callable[[Path], Assets], folder: Path) -> Assets:
    """Demo assets whose clips espeak-ng speaks; without it (scripts/install_system_deps.sh
    installs it) the test skips, saying how to install it."""
    from tunelab.demos.speech import MissingSynthesiser, espeak_binary

    try:
        espeak_binary()
    except MissingSynthesiser as exc:
        pytest.skip(str(exc))
    return ensure(folder)


@contextmanager
def recorded_orchestrator(store: Store) -> Iterator[tuple[Orchestrator, EventRecorder]]:
    """An orchestrator on `store` with a recorder of all its events; shut down on the way out."""
    from orch_helpers import EventRecorder

    from tunelab.orchestrator import Orchestrator

    orchestrator = Orchestrator(store)
    recorder = EventRecorder()
    orchestrator.subscribe(recorder)
    try:
        yield orchestrator, recorder
    finally:
        orchestrator.shutdown()


def finished(orchestrator: Orchestrator, run_id: int, wait_s: float = RUN_WAIT_S) -> dict[str, Any]:
    """The run's row once the orchestrator is idle again."""
    assert orchestrator.wait_idle(wait_s), "the run did not finish"
    return orchestrator.store.get_run(run_id)


def stopped_at_step(orchestrator: Orchestrator, recorder: EventRecorder, run_id: int, step: int, *,
                    timeout: float, wait_s: float = RUN_WAIT_S) -> dict[str, Any]:
    """Stop-and-save the run once it has reported `step`; its row when it has ended."""
    recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= step, timeout=timeout)
    orchestrator.stop(save=True, expected_run_id=run_id)
    return finished(orchestrator, run_id, wait_s)


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    """`tunelab <args>` in a child process on `home`; it must succeed."""
    done = subprocess.run([sys.executable, "-m", "tunelab.cli.main", *args], env={**os.environ, "TUNELAB_HOME": str(home)},
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def export_merged(home: Path, run_id: int, *extra: str) -> Path:
    """`tunelab export RUN --format merged` into <home>/outputs/merged; the folder."""
    dest = home / "outputs" / "merged"
    run_cli(home, "export", str(run_id), "--format", "merged", *extra, "--dest", str(dest))
    return dest


def speak_to_file(home: Path, run_id: int, *extra: str) -> Path:
    """`tunelab speak RUN "one two three"` into <home>/spoken.wav; the file."""
    out = home / "spoken.wav"
    run_cli(home, "speak", str(run_id), "one two three", "-o", str(out), *extra)
    return out


def tiny_tts_model(folder: Path) -> Path:
    """The text-to-speech demo's tiny Orpheus-style Llama and its codec/, built under `folder`
    from a few transcripts of its own (no espeak-ng needed: nothing is trained on clips); the model folder."""
    import json

    from tunelab.demos.tts import ensure_tts_demo_assets

    folder.mkdir(parents=True, exist_ok=True)
    transcripts = folder / "transcripts.jsonl"
    transcripts.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one two three", "four five six", "seven eight nine ten")))
    return ensure_tts_demo_assets(transcripts, folder / "tts").model_dir


def finished_tts_run(store: "Store", output_dir: Path, model: str = "tiny-tts") -> int:
    """A completed text-to-speech run recorded in `store` whose folder is `output_dir`
    (a model folder with its codec/ makes it one that speaks); its id."""
    run_id = store.create_run({"model_name": model, "eval_steps": 20}, model, "transcription")
    store.set_modality(run_id, "tts")
    store.finalize_run(run_id, status="completed", final_step=40, output_dir=output_dir)
    return run_id
