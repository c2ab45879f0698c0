"""Fake workers that misbehave on purpose, for the reliability suite and bench.

Each has the real worker's signature `(config, events, stops)` and is run by a live
server named in TUNELAB_WORKER_TARGET ("fault_workers:<function>"), in a real spawned
child, so every fault travels the same pipes, pump and store as a real run's would.
Well-behaved scripted training (`scripted_workers.trainer`) comes from the orchestrator
tests; what lives here are the faults only this suite causes.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any

from checkpoint_factory import make_checkpoint  # tests/, on the path of every scripted server
from tunelab import events as ev

HANG_LIMIT_S = 120  # a hanging worker still ends eventually if a test process dies
GARBAGE_COUNT = 1000


def _flush_and_exit(events: Any, code: int = 0) -> None:
    events.close()
    events.join_thread()
    os._exit(code)


def _step_seconds() -> float:
    return float(os.environ.get("SCRIPTED_STEP_SECONDS", "0"))


def _progress(step: int, total: int) -> dict[str, Any]:
    return ev.progress(step, total_steps=total, epoch=step / total, loss=5.0 / step, learning_rate=1e-3,
                       grad_norm=0.5, elapsed_seconds=step * 0.01)


def _hang_until_orphaned() -> None:
    """Ignore SIGTERM and wait: only a SIGKILL (or the parent's death) ends this."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    deadline = time.monotonic() + HANG_LIMIT_S
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.1)
    os._exit(3)


class _Stops:
    """The latest stop request, read on a thread ("save" or "cancel"; a cancel is final)."""

    def __init__(self, stops: Any):
        self.state: str | None = None
        threading.Thread(target=self._read, args=(stops,), daemon=True).start()

    def _read(self, stops: Any) -> None:
        while True:
            try:
                message = stops.get()
            except (EOFError, OSError, ValueError):
                return
            if self.state != "cancel":
                self.state = "save" if message.get("save") else "cancel"


def completes_at_once(config: dict[str, Any], events: Any, stops: Any) -> None:
    """One step and done: for fuzzing, where any accepted start must end quickly."""
    events.put(ev.make(ev.STATUS, message="training", stage="training"))
    events.put(_progress(1, 1))
    events.put(ev.complete(config.get("output_dir"), "done"))
    _flush_and_exit(events)


def hangs_while_saving(config: dict[str, Any], events: Any, stops: Any, *, checkpoints: bool = False) -> None:
    """Trains until a stop-and-save, starts the save (a partial tmp-checkpoint), and wedges.
    With `checkpoints`, it first writes a valid checkpoint every `save_steps` steps."""
    stop = _Stops(stops)
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    events.put(ev.make(ev.STATUS, message="training", stage="training"))
    total = config["max_steps"]
    for step in range(1, total + 1):
        time.sleep(_step_seconds())
        events.put(_progress(step, total))
        if checkpoints and config.get("save_steps") and step % config["save_steps"] == 0:
            make_checkpoint(output_dir, step)
        if stop.state is not None:
            events.put(ev.make(ev.STATUS, message=f"saving checkpoint-{step}", stage="saving"))
            partial = output_dir / f"tmp-checkpoint-{step}"
            partial.mkdir()
            (partial / "adapter_model.safetensors").write_bytes(b"half a tensor")
            time.sleep(0.3)  # let the feeder thread deliver what was sent
            _hang_until_orphaned()
    events.put(ev.complete(str(output_dir), "training completed"))
    _flush_and_exit(events)


def checkpoints_then_hangs_while_saving(config: dict[str, Any], events: Any, stops: Any) -> None:
    """A save that never ends after good periodic checkpoints: the last of them is what
    a run ended by the shutdown deadline resumes from."""
    hangs_while_saving(config, events, stops, checkpoints=True)


def _garbage_frames(step: int) -> list[bytes]:
    """Byte frames the parent cannot unpickle: truncated, wrong protocol, plain text."""
    whole = pickle.dumps(_progress(step, 1))
    return [whole[: len(whole) // 2], b"\x80\xff" + whole[2:], b"this is not a pickle\n", b""]


def _garbage_objects(step: int) -> list[Any]:
    """Objects that arrive whole but are not events the pump can apply."""
    return [
        "a bare string", 12345, None, ["a", "list"], {"no": "type"}, {"type": "teleport", "ts": 1.0},
        {"type": "progress", "step": "seven"}, {"type": "progress", "step": -step},
        {"type": "progress", "step": True}, {"type": "progress"},
        {"type": "status", "message": {"nested": "dict"}}, {"type": "stall"},
        {"type": "complete", "output_dir": 42}, {"type": "output_dir", "output_dir": ["x"]},
        {"type": "progress", "step": 2**70}, b"raw bytes object",
    ]


def garbage_flood(config: dict[str, Any], events: Any, stops: Any) -> None:
    """GARBAGE_COUNT malformed messages interleaved with real steps, then `complete`.

    Half are Python objects that are not valid events; half are raw frames written
    straight onto the queue's pipe (under its write lock, so framing stays intact) that
    fail to unpickle in the parent."""
    total = config["max_steps"]
    per_step = GARBAGE_COUNT // total
    sent = 0
    for step in range(1, total + 1):
        count = per_step if step < total else GARBAGE_COUNT - sent
        objects, frames = _garbage_objects(step), _garbage_frames(step)
        for i in range(count):
            kind = (sent + i) // 2  # walk through every kind of each half in turn
            if (sent + i) % 2:
                events.put(objects[kind % len(objects)])
            else:
                _send_raw_frame(events, frames[kind % len(frames)])
        sent += count
        events.put(_progress(step, total))
    events.put(ev.complete(config["output_dir"], f"done after {sent} garbage messages"))
    _flush_and_exit(events)


def _send_raw_frame(events: Any, payload: bytes) -> None:
    # Wait for the feeder thread to have written everything queued so far, so the raw
    # frame lands in order between real events (and never inside one of them).
    deadline = time.monotonic() + 10
    while events._buffer and time.monotonic() < deadline:
        time.sleep(0.001)
    events._sem.acquire()  # as `put` does: the reader releases one slot per frame it takes
    with events._wlock:
        events._writer.send_bytes(payload)


def reads_what_it_is_given(config: dict[str, Any], events: Any, stops: Any) -> None:
    """Reads every file its config points at, as the trainer would (data files, the model
    folder, the checkpoint to resume from, a `dataset` through `datasets.load_dataset`)
    and writes where the trainer would (its output folder, the TensorBoard folder, a
    local MLflow store). If the server ever let a path outside its folders through, this
    is what would touch it."""
    named = (config.get("local_datasets") or []) + (config.get("local_eval_datasets") or [])
    sources = [Path(p) for p in named]
    for folder in (config.get("model_name"), config.get("resume_from")):
        if folder and Path(folder).is_dir():
            sources += [p for p in Path(folder).rglob("*") if p.is_file()]
    for source in sources:
        if source.is_file():
            source.read_bytes()
    if config.get("dataset"):
        _load_dataset(config["dataset"])
    output_dir = Path(config["output_dir"])
    writes = [output_dir, config.get("tensorboard_dir"), _local_mlflow_store(config.get("mlflow_tracking_uri"))]
    for folder in filter(None, writes):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "adapter_config.json").write_text("{}")
    events.put(_progress(1, 1))
    events.put(ev.complete(str(output_dir), "read everything it was given"))
    _flush_and_exit(events)


def _load_dataset(name: str) -> None:
    import datasets

    try:
        datasets.load_dataset(name)
    except Exception:  # a hub id cannot load offline; only a local read matters here
        pass


def _local_mlflow_store(uri: str | None) -> str | None:
    if not uri or uri.startswith(("http://", "https://")):
        return None
    return uri.removeprefix("file://").removeprefix("sqlite:///")


def _secrets_of(config: dict[str, Any]) -> list[str]:
    s3 = config.get("s3") or {}
    found = [config.get("hf_token"), config.get("wandb_token")]
    found += [s3.get(k) for k in ("access_key_id", "secret_access_key", "session_token")]
    return [s for s in found if s]


def echoes_secrets(config: dict[str, Any], events: Any, stops: Any) -> None:
    """A chatty library: the run's secrets show up in status text, in malformed events
    (which the parent logs) and in the final error with its stack."""
    said = " ".join(_secrets_of(config))
    events.put(ev.make(ev.STATUS, message=f"logging in with {said}", stage="loading_model"))
    events.put({"type": "progress", "step": said})
    events.put({"type": said})
    for step in range(1, 4):
        events.put(_progress(step, 10))
    events.put(ev.error(f"401 Unauthorized for token {said}", f"Traceback: token={said}"))
    _flush_and_exit(events)
