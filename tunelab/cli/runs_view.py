"""What `tunelab runs` lists and how: queued runs first, then the history, newest first,
each with its owner and, when queued, its place in the queue.

The owner is the name of the API key that started the run; a run started with the home's
token or by the CLI has none, and shows nothing (and a page of such runs no owner column). Queued runs lead the first page in the
order the scheduler will start them (`Store.queued_runs`, position 1 first), whatever
their ids; the history below them leaves them out, so no run is listed twice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from tunelab.text import printable

SPARK_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float] | None) -> str:
    values = [v for v in values or [] if v is not None]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK_BARS[min(7, int((v - low) / span * 7.999))] for v in values)


def when(timestamp: float | None) -> str:
    """Like `ls -l`: the year only when it is not this year's (five columns kept for the name)."""
    if not timestamp:
        return ""
    moment = time.localtime(timestamp)
    return time.strftime("%m-%d %H:%M" if moment.tm_year == time.localtime().tm_year else "%Y-%m-%d %H:%M", moment)


def listed_runs(store: Any, limit: int, offset: int) -> list[dict[str, Any]]:
    """The rows `tunelab runs` shows: on the first page every queued run (in queue order,
    each with `queue_position`), then `limit` of the others from `offset`, newest first."""
    queued = store.queued_runs() if offset == 0 else []
    history = [r for r in store.list_runs(limit=limit, offset=offset) if r["status"] != "queued"]
    return queued + history


def queue_cell(run: dict[str, Any]) -> str:
    """'#2' for the second in the queue; a priority other than 0 is added: '#1 p5'."""
    position = run.get("queue_position")
    if run.get("status") != "queued" or position is None:
        return ""
    priority = run.get("queue_priority") or 0
    return f"#{position}" + (f" p{priority}" if priority else "")


def runs_table(rows: list[dict[str, Any]], wide: bool, width: int) -> Table:
    """The narrow table fits `width` columns (80 is enough): every cell but the name is
    kept whole and the name gives way with '…'. `wide` adds model, dataset and the
    sparkline and lets long cells wrap. The queue column appears while a run is queued, and
    the owner column when a listed run has one (a lab of one, without keys, keeps the room)."""
    with_queue = any(queue_cell(r) for r in rows)
    with_owner = any(r.get("owner") for r in rows)
    headers = ["id", "status", *(["queue"] if with_queue else []), *(["owner"] if with_owner else []), "modality",
               *(["name", "model", "dataset"] if wide else ["name"]), "steps", "final loss",
               *(["loss"] if wide else []), "started"]
    table_rows = []
    for r in rows:
        loss = f"{r['final_loss']:.4f}" if r.get("final_loss") is not None else ""
        steps = f"{r.get('final_step') or 0}/{r.get('total_steps') or '?'}"
        if wide:
            names = [r.get("display_name") or "", r["model_name"], r.get("dataset_name") or ""]
            middle = [*names, steps, loss, sparkline(r.get("loss_sparkline"))]
        else:
            middle = [r.get("display_name") or Path(r["model_name"]).name or r["model_name"], steps, loss]
        lead = [str(r["id"]), r["status"], *([queue_cell(r)] if with_queue else []),
                *([r.get("owner") or ""] if with_owner else []), r.get("modality") or ""]
        table_rows.append([*map(printable, lead), *map(printable, middle), when(r.get("started_at"))])
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i, header in enumerate(headers):
        if wide or header != "name":
            table.add_column(header, no_wrap=not wide or header in ("steps", "final loss", "started"),
                             justify="right" if header in ("id", "steps", "final loss") else "left", overflow="fold")
            continue
        # Rich would shrink every column alike; give the name only what the others leave.
        others = sum(max([len(h)] + [len(row[j]) for row in table_rows]) for j, h in enumerate(headers) if j != i)
        room = width - others - 2 * (len(headers) - 1)  # collapsed padding: two spaces between columns
        table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=max(8, room))
    for row in table_rows:
        table.add_row(*map(Text, row))
    return table
