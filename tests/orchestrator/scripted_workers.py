"""Fake workers for orchestrator tests: real spawn children that send scripted events.

Each function has the real worker's signature `(config, events, stops)` and is started
by the orchestrator by its dotted name, exactly like `tunelab.worker.entry:run_worker`.
They import nothing heavy, so a child starts in well under a second. `max_steps` sets how
many steps they train; `STEP_SECONDS` slows a step down where a test needs to act mid-run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from tunelab import events as ev

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for checkpoint_factory
from checkpoint_factory import make_checkpoint  # noqa: E402

STEP_SECONDS_ENV = "SCRIPTED_STEP_SECONDS"
HANG_LIMIT_S = 120  # a "hanging" worker still ends eventually, in case a test process dies


def _flush_and_exit(events, code: int = 0) -> None:
    events.close()
    events.join_thread()
    os._exit(code)


def _step_seconds() -> float:
    return float(os.environ.get(STEP_SECONDS_ENV, "0"))


class _StopReader:
    """The real worker's rule: a cancel is never undone by a later save."""

    def __init__(self, stops):
        self.state: str | None = None
        threading.Thread(target=self._loop, args=(stops,), daemon=True).start()
        threading.Thread(target=self._watch_parent, args=(os.getppid(),), daemon=True).start()

    @staticmethod
    def _watch_parent(parent: int) -> None:
        # As the real worker does (worker/entry.watch_parent): a server killed with -9 must
        # not leave this stand-in running on as an orphan after its test.
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    def _loop(self, stops) -> None:
        while True:
            try:
                message = stops.get()
            except (EOFError, OSError):
                return
            if self.state != "cancel":
                self.state = "save" if message.get("save") else "cancel"


def _first_step(config) -> int:
    if not config.get("resume_from"):
        return 1
    state = json.loads((Path(config["resume_from"]) / "trainer_state.json").read_text())
    return state["global_step"] + 1


def _hang(ignore_term: bool) -> None:
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    deadline = time.monotonic() + HANG_LIMIT_S
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.1)
    os._exit(3)


def _wait_for_release() -> None:
    """Block until the file named by SCRIPTED_RELEASE_FILE exists (if one is named)."""
    name = os.environ.get("SCRIPTED_RELEASE_FILE")
    deadline = time.monotonic() + HANG_LIMIT_S
    while name and not Path(name).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _progress(step: int, total: int, loss: float = None, **extra):
    loss = 5.0 / step if loss is None else loss
    return ev.progress(step, total_steps=total, epoch=step / total, loss=loss, learning_rate=1e-3,
                       grad_norm=0.5, elapsed_seconds=step * 0.01, **extra)


def trainer(config, events, stops, *, save_on_stop: bool = True) -> None:
    """A well-behaved worker: stages, steps, checkpoints every save_steps, stop/cancel."""
    stop = _StopReader(stops)
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    total = config["max_steps"]
    for stage in ("loading_model", "loading_dataset", "formatting", "configuring", "training"):
        events.put(ev.make(ev.STATUS, message=f"stage {stage}", stage=stage))
    events.put(ev.make(ev.OUTPUT_DIR, output_dir=str(output_dir)))
    step = _first_step(config) - 1
    logging_steps = config.get("logging_steps") or 1
    while step < total:
        step += 1
        time.sleep(_step_seconds())
        if step % logging_steps == 0:  # like HF Trainer: the steps between logs go unreported
            events.put(_progress(step, total))
        if config.get("save_steps") and step % config["save_steps"] == 0:
            make_checkpoint(output_dir, step)
        if stop.state == "cancel":
            # A save caught halfway by the cancel, like HF's tmp-checkpoint-N.
            (output_dir / f"tmp-checkpoint-{step}").mkdir()
            (output_dir / f"tmp-checkpoint-{step}" / "adapter_model.safetensors").write_bytes(b"partial")
            events.put(ev.complete(None, "cancelled"))
            _flush_and_exit(events)
        if stop.state == "save":
            if save_on_stop and not (output_dir / f"checkpoint-{step}").exists():
                make_checkpoint(output_dir, step)
            events.put(ev.complete(str(output_dir), f"stopped at step {step}", output_dir / f"checkpoint-{step}"))
            _flush_and_exit(events)
    _wait_for_release()
    (output_dir / "adapter_config.json").write_text("{}")
    events.put(ev.complete(str(output_dir), "training completed"))
    _flush_and_exit(events)


def forgets_to_save(config, events, stops) -> None:
    """Says it stopped and saved, but never wrote the checkpoint."""
    trainer(config, events, stops, save_on_stop=False)


def nan_losses(config, events, stops) -> None:
    total = config["max_steps"]
    for step in range(1, total + 1):
        loss = math.nan if step % 2 == 0 else 1.0 / step
        events.put(ev.progress(step, total_steps=total, loss=loss, learning_rate=math.inf if step == 3 else 1e-3,
                               grad_norm=-math.inf if step % 3 == 0 else 0.25))
    events.put(ev.complete(config["output_dir"], "done"))
    _flush_and_exit(events)


class Unpicklable:
    """Pickles fine in the child; fails to unpickle in the parent."""

    def __reduce__(self):
        return (_refuse_to_load, ())


def _refuse_to_load():
    raise RuntimeError("this object refuses to be unpickled")


MALFORMED_KINDS = (
    "just a string",
    42,
    None,
    ["a", "list"],
    {"no": "type"},
    {"type": "teleport"},
    {"type": "progress", "step": "seven"},
    {"type": "progress", "step": -1},
    {"type": "progress", "step": True},
    {"type": "status", "message": 12},
    {"type": "complete", "output_dir": 5},
    Unpicklable(),
)


def malformed_flood(config, events, stops) -> None:
    """1,000 malformed messages interleaved with the real steps."""
    total = config["max_steps"]
    sent_bad = 0
    for step in range(1, total + 1):
        for _ in range(1000 // total):
            events.put(MALFORMED_KINDS[sent_bad % len(MALFORMED_KINDS)])
            sent_bad += 1
        events.put(_progress(step, total))
    while sent_bad < 1000:
        events.put(MALFORMED_KINDS[sent_bad % len(MALFORMED_KINDS)])
        sent_bad += 1
    events.put(ev.complete(config["output_dir"], "done"))
    _flush_and_exit(events)


def ignores_stop(config, events, stops) -> None:
    """Trains forever, deaf to stop messages and to SIGTERM: only a kill ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    parent = os.getppid()
    step = 0
    deadline = time.monotonic() + HANG_LIMIT_S
    while time.monotonic() < deadline and os.getppid() == parent:
        step += 1
        events.put(_progress(step, 1_000_000))
        time.sleep(0.05)
    os._exit(3)


def hangs_after_complete(config, events, stops) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so the watchdog has to kill it
    total = config["max_steps"]
    for step in range(1, total + 1):
        events.put(_progress(step, total))
    final_save = make_checkpoint(Path(config["output_dir"]), total)
    events.put(ev.complete(config["output_dir"], "done, but not leaving", final_save))
    time.sleep(0.5)  # let the feeder thread deliver before hanging
    _hang(ignore_term=True)


def killed_mid_run(config, events, stops) -> None:
    """Reports some steps, makes sure they left the process, then dies by SIGKILL."""
    for step in range(1, config["max_steps"] + 1):
        events.put(_progress(step, 1000))
    events.close()
    events.join_thread()
    os.kill(os.getpid(), signal.SIGKILL)


def crashes_at_start(config, events, stops) -> None:
    raise RuntimeError("boom before any event")


def reports_error(config, events, stops) -> None:
    events.put(_progress(1, 10))
    events.put(ev.error("CUDA out of memory (pretend)", "Traceback: ..."))
    _flush_and_exit(events)


def reports_environment(config, events, stops) -> None:
    """Sends the environment variables the orchestrator controls, then completes."""
    seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "HF_HUB_DISABLE_XET", "SCRIPTED_MARKER",
                                           "TUNELAB_DATABASE_URL", "TUNELAB_TOKEN")}
    events.put(ev.make(ev.STATUS, message="env " + json.dumps(seen), stage="loading_model"))
    events.put(_progress(1, 1))
    events.put(ev.complete(config["output_dir"], "done"))
    _flush_and_exit(events)


def stalls_unless_xet_disabled(config, events, stops) -> None:
    """Stalls in the model download unless HF_HUB_DISABLE_XET=1 was set before it started."""
    events.put(ev.make(ev.STATUS, message="loading model", stage="loading_model"))
    events.put(ev.make(ev.MODEL_LOAD_STARTED))
    if os.environ.get("HF_HUB_DISABLE_XET") != "1":
        events.put(ev.make(ev.STALL, message="no bytes for 120 s"))
        _hang(ignore_term=False)
    events.put(ev.make(ev.STATUS, message=f"download ok with HF_HUB_DISABLE_XET={os.environ['HF_HUB_DISABLE_XET']}",
                       stage="loading_model"))
    events.put(ev.make(ev.MODEL_LOAD_COMPLETED))
    events.put(_progress(1, 2))
    events.put(_progress(2, 2))
    events.put(ev.complete(config["output_dir"], "done"))
    _flush_and_exit(events)


def always_stalls(config, events, stops) -> None:
    events.put(ev.make(ev.STATUS, message="loading model", stage="loading_model"))
    events.put(ev.make(ev.STALL, message="no bytes for 120 s"))
    _hang(ignore_term=False)


def waits_for_file(config, events, stops) -> None:
    """Reports one step, then waits until the file named in SCRIPTED_RELEASE_FILE exists."""
    events.put(_progress(1, 2))
    _wait_for_release()
    events.put(_progress(2, 2))
    events.put(ev.complete(config["output_dir"], "done"))
    _flush_and_exit(events)


def notes_its_devices(config, events, stops) -> None:
    """The well-behaved trainer, after writing the CUDA_VISIBLE_DEVICES it was given to
    `devices.txt` in its output folder (what the scheduler really assigned it)."""
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "devices.txt").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    trainer(config, events, stops)
