"""Dataset files on the server: the upload bound, a light look at a file, and a free name.

The server may not load `datasets` (nor anything of the worker), so a file is looked at
here with the standard library only: JSON Lines line by line, JSON whole (it is bounded
by the upload limit), CSV by its header and rows, Parquet by its magic bytes and, when
pyarrow is importable, its footer's row count and columns. That is enough to refuse a
file that is not what its extension says and to show rows and columns in the picker;
the format (alpaca, chatml, ...) is named by the dataset preview, which reads the file
the way training will (routes_datasets.py).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

UPLOAD_MAX_ENV = "TUNELAB_UPLOAD_MAX_MB"
DEFAULT_UPLOAD_MAX_MB = 512.0
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
# A listing looks into files up to this size; a larger one shows its size only, so a
# listing of big data stays quick.
LOOK_LIMIT_BYTES = 64 << 20
PARQUET_MAGIC = b"PAR1"


def upload_max_bytes() -> int:
    try:
        megabytes = float(os.environ.get(UPLOAD_MAX_ENV, DEFAULT_UPLOAD_MAX_MB))
    except ValueError:
        megabytes = DEFAULT_UPLOAD_MAX_MB
    return max(int(megabytes * (1 << 20)), 0)


def too_large_message(limit: int) -> str:
    return (f"the file is larger than {limit / (1 << 20):.3g} MiB, the most this server accepts for an upload "
            f"({UPLOAD_MAX_ENV}); nothing was kept. Upload a smaller file or a slice of it, or copy it into "
            "the home's datasets folder on the server")


class NotData(ValueError):
    """The file cannot be read as the data its extension names."""


@dataclass
class Look:
    rows: int | None = None
    columns: list[str] = field(default_factory=list)


def _keys(columns: list[str], row: object) -> None:
    if isinstance(row, dict):
        columns.extend(k for k in row if k not in columns)


def look(path: Path) -> Look:
    """Rows and columns of a data file, by its extension; NotData says what is wrong."""
    suffix = path.suffix.lower()
    found = Look(columns=[])
    if suffix == ".jsonl":
        found.rows = 0
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise NotData(f"line {number} is not JSON ({exc.msg if hasattr(exc, 'msg') else exc}); "
                                  "a .jsonl file holds one JSON object per line") from None
                if not isinstance(row, dict):
                    raise NotData(f"line {number} is not a JSON object; a .jsonl file holds one object per line")
                found.rows += 1
                if found.rows <= 100:
                    _keys(found.columns, row)
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise NotData(f"it is not JSON ({exc})") from None
        rows = data if isinstance(data, list) else next((v for v in data.values() if isinstance(v, list)), None) if isinstance(data, dict) else None
        if rows is None:
            raise NotData("it holds no list of rows; a .json dataset is a list of objects (or an object with one such list)")
        found.rows = len(rows)
        for row in rows[:100]:
            _keys(found.columns, row)
    elif suffix == ".csv":
        try:
            with open(path, encoding="utf-8", newline="") as text:
                reader = csv.reader(text)
                found.columns = next(reader, [])
                found.rows = sum(1 for _ in reader)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise NotData(f"it is not CSV text ({exc})") from None
        if not found.columns:
            raise NotData("it is empty; a .csv dataset starts with a header row")
    elif suffix == ".parquet":
        _look_parquet(path, found)
    else:
        raise NotData(f"{suffix or 'no extension'} is not a dataset type; use one of {', '.join(EXTENSIONS)}")
    return found


def _look_parquet(path: Path, found: Look) -> None:
    with open(path, "rb") as data:
        head = data.read(4)
        data.seek(max(path.stat().st_size - 4, 0))
        tail = data.read(4)
    if head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
        raise NotData("it is not a Parquet file (no PAR1 marker at its start and end)")
    try:
        import pyarrow.parquet as pq  # optional here: rows and columns from the footer only
    except ImportError:
        return
    try:
        meta = pq.read_metadata(path)
    except Exception as exc:  # pyarrow raises several kinds for a broken footer
        raise NotData(f"its Parquet footer cannot be read ({exc})") from None
    found.rows = meta.num_rows
    found.columns = list(meta.schema.names)


def free_name(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/<stem>-2<ext>`, `-3`, ... if it is taken (a first guess:
    `claim` makes it atomic)."""
    stem, suffix = Path(name).stem, Path(name).suffix
    candidate, number = folder / name, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = folder / f"{stem}-{number}{suffix}"
    return candidate


def claim(written: Path, folder: Path, name: str) -> Path:
    """Give the finished upload `written` its name in `folder` without ever replacing a
    file: a hard link fails when the name exists (even one made a moment ago), and then
    the next suffix is tried."""
    while True:
        target = free_name(folder, name)
        try:
            os.link(written, target)
        except FileExistsError:
            continue
        written.unlink()
        return target
