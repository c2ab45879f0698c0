"""Per-step metrics of a run: the fixed columns (`metrics`) and the named extras (`metric_extras`)."""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable, Mapping

from tunelab.store.rows import metric_values
from tunelab.store.schema import METRIC_FIELDS, UPSERT_EXTRA, UPSERT_METRIC


class MetricsMixin:
    """The metric rows. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry` and
    `_require_run`."""

    def add_metrics(self, run_id: int, rows: Iterable[Mapping[str, Any]]) -> None:
        """Upsert metric rows (keys beyond the metric fields are ignored, so progress
        events can be passed as they are). Non-finite numbers are stored as NULL. A row's
        `extra` {name: value} goes to metric_extras, one value per name and step (a later
        report for a step replaces it); names and values are checked by events.clean_extra."""
        checked = [metric_values(row) for row in rows]
        params = [(run_id, step, *values) for step, values, _ in checked]
        extras = [(run_id, step, name, value) for step, _, extra in checked for name, value in extra.items()]
        if not params:
            return

        def work(conn: sqlite3.Connection) -> None:
            try:
                conn.executemany(UPSERT_METRIC, params)
                conn.executemany(UPSERT_EXTRA, extras)
            except self._dialect.integrity_errors:
                self._require_run(conn, run_id)
                raise

        self._retry(work, write=True)

    def get_metrics(self, run_id: int) -> list[dict[str, Any]]:
        """Every metric row of a run, ordered by step."""
        rows = self._retry(
            lambda c: c.execute(
                f"SELECT step, {', '.join(METRIC_FIELDS)} FROM metrics WHERE run_id = ? ORDER BY step", (run_id,)
            ).fetchall(),
            write=False,
        )
        return [dict(r) for r in rows]

    def get_metric_extras(self, run_id: int) -> dict[str, dict[str, list[Any]]]:
        """A run's extra metrics as series: {name: {"steps": [...], "values": [...]}}, names
        in alphabetical order, steps ascending. A series has only the steps that logged it
        (an eval metric only the eval steps)."""
        rows = self._retry(
            lambda c: c.execute(
                "SELECT name, step, value FROM metric_extras WHERE run_id = ? ORDER BY name, step", (run_id,)
            ).fetchall(),
            write=False,
        )
        series: dict[str, dict[str, list[Any]]] = {}
        for name, step, value in rows:
            points = series.setdefault(name, {"steps": [], "values": []})
            points["steps"].append(step)
            points["values"].append(value)
        return series

    def metric_arrays(self, run_id: int) -> dict[str, Any]:
        """Every metric row as paired arrays for the API: `steps` plus one list per
        field, one entry per step, None where a value is unknown; and `extra`, the
        series of get_metric_extras."""
        rows = self.get_metrics(run_id)
        return {"steps": [r["step"] for r in rows], **{f: [r[f] for r in rows] for f in METRIC_FIELDS},
                "extra": self.get_metric_extras(run_id)}
