"""Target 4 — time to first step: `POST /api/train/start` until the first `progress`
event reaches an SSE client, against a bare training script's launch until its first step.

The server is the real one (`python -m tunelab.server`, prewarming on as it is by
default): each run is handed to a child that has already imported torch, transformers,
peft, trl and datasets, and the next such child is prepared after the run. The bare
script is `plain_trl.py`, launched fresh the way one would run it. Both train the demo's
tiny Llama with identical settings; the clock stops when the first step is done.
"""

from __future__ import annotations

import time

import psutil

from assets import demo_assets
from results import Result, standalone
from runs import plain_run
from server_proc import Server, launch, sse_events
from sidebyside import alternate, ratios, spread


def settings(demo) -> tuple[dict, dict]:
    shared = dict(max_steps=3, batch_size=4, learning_rate=3e-3, lora_r=16, lora_alpha=32, seed=3407)
    body = dict(model_name=str(demo.model_dir), local_datasets=[str(demo.chatml)], max_seq_length=128,
                gradient_accumulation_steps=1, **shared)
    return body, dict(model=str(demo.model_dir), data=str(demo.chatml), max_length=128, **shared)


def server_first_step(server: Server, body: dict, used_warm: list[bool]) -> float:
    """Seconds from the start request to the first progress event at an SSE client that
    connects once the start is answered (as the web page does; `last_event_id=0` replays
    any step it was too late for)."""
    waiting = {c.pid for c in psutil.Process(server.process.pid).children()}
    with server.client() as client:
        started = time.time()
        client.post("/api/train/start", json=body).raise_for_status()
        first = None
        with client.stream("GET", "/api/train/progress", params={"last_event_id": 0}) as stream:
            for name, _, arrived in sse_events(stream.iter_lines()):
                if name == "progress" and first is None:
                    first = arrived - started
                if name in ("complete", "error"):
                    break
        used_warm.append(client.get("/api/train/status").json()["worker_pid"] in waiting)
    server.wait_until_warm()
    if first is None:
        raise RuntimeError("the run ended without a progress event")
    return first

UNMET_NOTES = {
    "first_step": "With the imports done ahead, a run's first step still waits for loading the model and tokenizer, "
                  "reading and tokenizing the data, building the trainer and the first step itself (about 0.4 s for "
                  "the demo model when the machine is quiet). A run handed to a worker whose imports are still under "
                  "way (started less than ~6 s after the previous run ended) waits for them.",
}


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    body, plain_settings = settings(demo)
    reps = 2 if quick else 4
    used_warm: list[bool] = []
    server = launch(data_root=demo.root)
    try:
        server.wait_until_warm()
        runs = alternate([("tunelab server", lambda: server_first_step(server, body, used_warm)),
                          ("bare script", lambda: plain_run(plain_settings, stop_after_first_step=True).first_step_after_launch)],
                         reps)
    finally:
        server.stop()
    ours, bare = runs["tunelab server"], runs["bare script"]
    return [Result(
        key="first_step", title="4. Time to first step",
        measures="POST /api/train/start → first progress event at an SSE client ÷ bare script launch → first step",
        ratio=ratios(ours, bare), target=0.3, higher_is_better=False,
        command=f"python bench/first_step.py{' --quick' if quick else ''}",
        details=[
            "demo tiny Llama, LoRA r16, chat data, batch 4, max 128 tokens; `python -m tunelab.server` with its "
            "default prewarmed worker vs `python bench/plain_trl.py` launched fresh",
            f"tunelab server: {spread(ours).text(2)} s; bare script: {spread(bare).text(2)} s",
        ],
        checks={"every run was handed to the prewarmed worker": all(used_warm)},
    )]


if __name__ == "__main__":
    standalone("first_step", measure, UNMET_NOTES)
