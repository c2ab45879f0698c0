"""A worker that reports progress as fast as it can, without training anything.

It runs in a real spawned child and sends real events through the real orchestrator, so
the server's stream sees a flood of steps arriving while clients disconnect, reconnect
and fall behind. `config["flood_steps"]` steps, then `complete`; a stop ends it early.
"""

from __future__ import annotations

import os
import queue
import time
from typing import Any

from tunelab import events

PAUSE_EVERY = 50
PAUSE_S = 0.005


def run(config: dict[str, Any], events_queue: Any, stops: Any) -> None:
    total = int(config.get("max_steps") or 1)
    events_queue.put(events.make(events.STATUS, message="flooding", stage="training"))
    for step in range(1, total + 1):
        events_queue.put(events.progress(step, total_steps=total, loss=1.0 / step, learning_rate=1e-3))
        if step % PAUSE_EVERY == 0:
            time.sleep(PAUSE_S)  # keep the flood steady rather than one burst
            try:
                stops.get_nowait()
                break
            except queue.Empty:
                pass
    events_queue.put(events.complete(config.get("output_dir"), "flood finished"))
    events_queue.close()
    events_queue.join_thread()
    os._exit(0)
