"""A module only a prewarmed child imports ahead of its job (see test_prewarm.py).

`WARM_MARKER_SLEEP_S` makes its import slow, so a job can arrive while the child is
still importing."""

import os
import time

time.sleep(float(os.environ.get("WARM_MARKER_SLEEP_S", "0")))
