"""A scripted worker for the event-path benchmark (run by a real server through
TUNELAB_WORKER_TARGET): a real spawn child that sends real progress events without
training, so the path worker → pump → store → SSE client is what gets measured.

It sends `max_steps` progress events. A `display_name` of "<N> steps/s" paces them at N
a second, keeping its core busy in between as a training run does; without one it
sends them as fast as it can.
"""

from __future__ import annotations

import os
import re
import time

from tunelab import events as ev


def _progress(step: int, total: int) -> dict:
    return ev.progress(step, total_steps=total, epoch=step / total, loss=2.0 / step ** 0.5, learning_rate=2e-4,
                       grad_norm=0.5, num_tokens=step * 512, elapsed_seconds=step * 0.01)


def scripted(config, events, stops) -> None:
    total = config["max_steps"]
    pace = re.fullmatch(r"(\d+) steps/s", config.get("display_name") or "")
    per_second = int(pace.group(1)) if pace else None
    events.put(ev.make(ev.STATUS, message="scripted training", stage="training"))
    started = time.perf_counter()
    for step in range(1, total + 1):
        if per_second:
            due = started + step / per_second
            while time.perf_counter() < due:
                pass  # busy, like a training step
        events.put(_progress(step, total))
    events.put(ev.complete(config["output_dir"], "scripted run finished"))
    events.close()
    events.join_thread()
    os._exit(0)
