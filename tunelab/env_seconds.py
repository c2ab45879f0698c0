"""Durations a deployment sets through the environment (`TUNELAB_*_S` variables).

One reading for all of them: a number of seconds above zero, else the default — a typo in
a timeout must not turn it off or make it zero.
"""

from __future__ import annotations

import os


def positive_seconds(name: str, default: float) -> float:
    """The environment variable `name` as seconds above 0, else `default`."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default
