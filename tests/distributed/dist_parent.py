"""A parent for the parent-kill test: `python dist_parent.py CONFIG_JSON` runs an
Orchestrator (the server's, without HTTP) with one run in the TUNELAB_HOME it is given,
prints each progress step as a JSON line, and waits for the run (or to be killed)."""

from __future__ import annotations

import json
import sys

from tunelab import paths
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store


def main() -> None:
    orchestrator = Orchestrator(Store(paths.db_path()))
    orchestrator.subscribe(lambda e: print(json.dumps({"step": e["step"]}), flush=True) if e["type"] == "progress" else None)
    orchestrator.start(json.loads(sys.argv[1]))
    orchestrator.wait_idle()
    orchestrator.shutdown()


if __name__ == "__main__":
    main()
