"""Scripted workers for the prewarm tests: real children that say who they are.

`reports_identity` sends one `status` whose message is `identity {json}` with the
process id, whether `warm_marker` was imported before the job arrived (only a prewarmed
child does that), and SCRIPTED_MARKER from its environment; then one step and `complete`.
"""

from __future__ import annotations

import json
import os
import sys

from tunelab import events as ev


def reports_identity(config, events, stops) -> None:
    facts = {"pid": os.getpid(), "preloaded": "warm_marker" in sys.modules,
             "marker": os.environ.get("SCRIPTED_MARKER")}
    events.put(ev.make(ev.STATUS, message="identity " + json.dumps(facts), stage="loading_model"))
    events.put(ev.progress(1, total_steps=1, loss=1.0))
    events.put(ev.complete(config["output_dir"], "done"))
    events.close()
    events.join_thread()
    os._exit(0)
