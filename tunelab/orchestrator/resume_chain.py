"""The runs a resumed run continues, and the step at which each handed over.

A resume starts a new run (its own id, metrics and status) that carries on the step count
of the run it resumed from (`resumed_from_run_id`), from that run's checkpoint. So one
curve is spread over a chain of runs: this module walks the chain back and says, for each
earlier run, up to which step its metrics belong to the curve. A run can be resumed again
after a failed continuation, so an earlier run may hold steps past the one its successor
started from; those are a dead branch and are left out.

Torch-free and SQL-free (it reads through the Store): the server's run detail, the page's
charts and `tunelab show` all read the chain from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Callable

from tunelab.checkpoints import CHECKPOINT_NAME

# A chain longer than this is a broken database (a loop), not a lab's history.
MAX_CHAIN = 1000


@dataclass(frozen=True)
class EarlierRun:
    """One run of the chain: its row, and the step the run after it resumed from (its
    steps after that one are not part of the curve). `until_step` is None when the
    resume point is unknown (a continuation that started afresh): all its steps count."""

    run: dict[str, Any]
    until_step: int | None


def resumed_at_step(run: dict[str, Any]) -> int | None:
    """The step `run` resumed from: the step of the `checkpoint-<N>` folder its stored
    config names in `resume_from`; None for a fresh run or an unknown point."""
    value = (run.get("config") or {}).get("resume_from")
    if not value:
        return None
    named = CHECKPOINT_NAME.fullmatch(PurePath(str(value)).name)
    return int(named.group(1)) if named else None


def earlier_runs(store: Any, run: dict[str, Any],
                 may_read: Callable[[dict[str, Any]], bool] = lambda row: True) -> list[EarlierRun]:
    """The runs `run` continues, oldest first. The walk stops at a run that is gone or
    that `may_read` refuses (nothing before it is shown either: its steps lead there)."""
    chain: list[EarlierRun] = []
    seen = {run["id"]}
    later = run
    while later.get("resumed_from_run_id") is not None and len(chain) < MAX_CHAIN:
        parent_id = later["resumed_from_run_id"]
        parent = store.get_run(parent_id) if parent_id not in seen else None
        if parent is None or not may_read(parent):
            break
        seen.add(parent_id)
        chain.append(EarlierRun(parent, resumed_at_step(later)))
        later = parent
    return chain[::-1]


def metric_rows_until(store: Any, run_id: int, until_step: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's metric rows and extra series (as the store gives them) up to `until_step`."""
    keep = (lambda step: True) if until_step is None else (lambda step: step <= until_step)
    rows = [r for r in store.get_metrics(run_id) if keep(r["step"])]
    extras = {}
    for name, series in store.get_metric_extras(run_id).items():
        pairs = [(s, v) for s, v in zip(series["steps"], series["values"]) if keep(s)]
        if pairs:
            extras[name] = {"steps": [s for s, _ in pairs], "values": [v for _, v in pairs]}
    return rows, extras


def describe(run: dict[str, Any], chain: list[EarlierRun]) -> str | None:
    """'resumed from run 3 at step 40, which resumed from run 1 at step 20' (`tunelab
    show`); None for a run that resumed nothing. A run no longer in the history is named
    by its id alone."""
    if run.get("resumed_from_run_id") is None:
        return None
    links, later = [], run
    for part in [*reversed(chain), None]:
        parent_id = later.get("resumed_from_run_id") if part is None else part.run["id"]
        if parent_id is None:
            break
        step = resumed_at_step(later)
        links.append(f"run {parent_id}" + (f" at step {step}" if step is not None else "")
                     + (" (no longer in the history)" if part is None else ""))
        if part is None:
            break
        later = part.run
    return "resumed from " + ", which resumed from ".join(links)
