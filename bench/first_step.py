"""Target 4 — time to first step, like against like: a prewarmed server against a
prewarmed peer, and cold against cold.

Headline: `POST /api/train/start` until the first `progress` event reaches an SSE client,
on the real server (`python -m tunelab.server`, prewarming on as it is by default: once a
client has read the lab, as the page does when it opens, each run is handed to a child
that has already imported torch, transformers, peft, trl and datasets), against a notebook whose import cell already ran: `plain_trl.py`'s first step
counted from the moment its imports are done (it reports that moment). Both have paid
their imports before the clock starts; what is left is loading the model and tokenizer,
reading and tokenizing the data, building the trainer and the first step.

Beside it, cold against cold: `tunelab serve` launched fresh with a run started as soon as
it answers (no prewarmed worker is ready yet; the launch → first answer part is reported
too), against the same plain script launched fresh, imports and all. Both train the
demo's tiny Llama with the same settings; the clock stops when the first step is done.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

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


def server_first_step(server: Server, body: dict, used_warm: list[bool], settle: bool = True) -> float:
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
    if settle:
        server.wait_until_warm()
    if first is None:
        raise RuntimeError("the run ended without a progress event")
    return first


def cold_first_step(demo, body: dict, cold_parts: list[tuple[float, float]]) -> float:
    """Seconds from launching `tunelab serve` (fresh, nothing prewarmed yet) to the first
    progress event of a run started as soon as the server answers."""
    cli = shutil.which("tunelab", path=str(Path(sys.executable).parent)) or "tunelab"
    server = launch(data_root=demo.root, command=[cli, "serve", "--port", "{port}"])
    try:
        answered = time.monotonic() - server.launched
        first = server_first_step(server, body, [], settle=False)
    finally:
        server.stop()
    cold_parts.append((answered, first))
    return answered + first


UNMET_NOTES = {
    "first_step": "Against a notebook whose imports already ran, the prewarmed worker has paid nothing more than the "
                  "notebook has: both still load the model and tokenizer, read and tokenize the data, build the "
                  "trainer and take the first step, and the server adds its HTTP round trips and a process hand-over. "
                  "Reaching half the notebook's time needs work done before the start is pressed, e.g. the model "
                  "and tokenizer loaded in the prewarmed worker while the form is filled in (not built yet).",
}


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    body, plain_settings = settings(demo)
    reps = 2 if quick else 4
    used_warm: list[bool] = []
    cold_parts: list[tuple[float, float]] = []
    # Nothing asks this server anything while the other arms run; the page would poll every
    # few seconds, so its warm worker is kept for the whole comparison (warm_on_use.py).
    server = launch(data_root=demo.root, extra_env={"TUNELAB_WARM_IDLE_S": "3600"})
    try:
        with server.client() as client:
            client.get("/api/runs").raise_for_status()  # the page opens: the warm worker starts
        server.wait_until_warm()
        runs = alternate([("tunelab server", lambda: server_first_step(server, body, used_warm)),
                          ("bare script", lambda: plain_run(plain_settings, stop_after_first_step=True)),
                          ("cold tunelab serve", lambda: cold_first_step(demo, body, cold_parts))],
                         reps)
    finally:
        server.stop()
    ours, cold = runs["tunelab server"], runs["cold tunelab serve"]
    bare = [log.first_step_after_launch for log in runs["bare script"]]
    notebook = [log.first_step_after_imports for log in runs["bare script"]]
    arms = {"tunelab server": {"tool": "python -m tunelab.server", "prewarm": "on (default)", "clock": "start request → "
                               "first progress event at an SSE client"},
            "notebook": {"tool": "bench/plain_trl.py", "clock": "imports done → first step"},
            "cold tunelab serve": {"tool": "tunelab serve", "prewarm": "not ready yet", "clock": "launch → first progress"},
            "bare script": {"tool": "bench/plain_trl.py", "clock": "launch → first step"}}
    return [Result(
        key="first_step", title="4. Time to first step",
        measures="prewarmed server: POST /api/train/start → first progress event at an SSE client ÷ a notebook whose "
                 "imports already ran: imports done → first step",
        ratio=ratios(ours, notebook), target=0.5, higher_is_better=False, arms=arms,
        command=f"python bench/first_step.py{' --quick' if quick else ''}",
        details=[
            "demo tiny Llama, LoRA r16, chat data, batch 4, max 128 tokens; `python -m tunelab.server` with its "
            "default prewarmed worker vs `python bench/plain_trl.py` launched fresh",
            f"side by side — prewarmed server: {spread(ours).text(2)} s; cold `tunelab serve` + start: "
            f"{spread(cold).text(2)} s (launch → first answer {spread([a for a, _ in cold_parts]).text(2)} s, "
            f"start → first step {spread([b for _, b in cold_parts]).text(2)} s); bare script: "
            f"{spread(bare).text(2)} s; notebook (bare script, imports already done): {spread(notebook).text(2)} s",
            f"cold against cold (per repetition): cold `tunelab serve` + start ÷ bare script launch "
            f"{ratios(cold, bare).text(2)}",
        ],
        checks={"every run was handed to the prewarmed worker": all(used_warm)},
    )]


if __name__ == "__main__":
    standalone("first_step", measure, UNMET_NOTES)
