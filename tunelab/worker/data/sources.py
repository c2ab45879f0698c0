"""Loading raw training data: local files, hub datasets and S3, with slicing and eval choice.

`load_raw(config, cache_dir)` returns `RawData(train, eval, format)`: `datasets.Dataset`s
whose columns carry canonical names (after `column_mapping`), and the detected format.
`datasets` writes its Arrow copies into `cache_dir` (the run's own folder, or a preview's
temporary one), never into the user's global cache; every later `.map()`, split or
filter of those datasets writes its cache files next to them.
The eval set is chosen in this order: `eval_split`; `local_eval_datasets`; a split with a
conventional name (validation, valid, val, test) in a hub or S3 dataset; finally a
held-out share of the training rows (`eval_holdout`, 5% when unset). No eval set is
built when `eval_steps` is 0. Torch-free.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker.data.formats import DataFormatError, detect_format, required_columns
from tunelab.worker.families.speech.formats import undecoded_audio

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig, WorkerS3Source

# File suffix -> `datasets` builder name.
DATA_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
EVAL_SPLIT_NAMES = ("validation", "valid", "val", "test")
DEFAULT_HOLDOUT = 0.05
# Rows read from a streamed eval split: enough for a stable loss, cheap to evaluate.
STREAMED_EVAL_ROWS = 500
DETECTION_SAMPLE_ROWS = 20


@dataclass
class RawData:
    train: Any  # datasets.Dataset
    eval: Any | None
    format: str


def load_raw(config: WorkerConfig, cache_dir: Path) -> RawData:
    """Load, slice, map columns, detect the format and choose the eval set."""
    splits = _load_splits(config, cache_dir)
    train_name = config.train_split
    if train_name not in splits:
        raise DataFormatError("train_split", f"the dataset has no split '{train_name}'; it has {sorted(splits)}")
    # A streamed split was already cut to the slice while reading it.
    train = splits[train_name] if config.streaming else _slice(splits[train_name], config)
    eval_set = _choose_eval(splits, train_name, config, cache_dir)
    train, eval_set = undecoded_audio(train), undecoded_audio(eval_set) if eval_set is not None else None
    if eval_set is None and _wants_eval(config):
        train, eval_set = _hold_out(train, config)

    train = _apply_column_mapping(train, config.column_mapping, "training data")
    fmt = config.format
    if fmt == "auto":
        fmt = detect_format(train.column_names, _sample(train))
    train = _name_text_column(train, fmt)
    missing = required_columns(fmt, train.column_names, _sample(train))
    if missing:
        raise DataFormatError("column_mapping", f"format {fmt} needs columns {missing}; the data has {train.column_names}. Map them, e.g. column_mapping: {{{missing[0]}: your_column}}")
    if eval_set is not None:
        eval_set = _name_text_column(_apply_column_mapping(eval_set, config.column_mapping, "eval data"), fmt)
        missing = required_columns(fmt, eval_set.column_names, _sample(eval_set))
        if missing:
            field = "local_eval_datasets" if config.local_eval_datasets else "eval_split"
            raise DataFormatError(field, f"the eval data lacks columns {missing} that the training data ({fmt}) has; its columns are {eval_set.column_names}")
    return RawData(train=train, eval=eval_set, format=fmt)


def _wants_eval(config: WorkerConfig) -> bool:
    return config.eval_steps > 0


def _sources(config: WorkerConfig) -> list[str]:
    given = {"dataset": config.dataset, "local_datasets": config.local_datasets, "s3": config.s3}
    return [name for name, value in given.items() if value]


def _load_splits(config: WorkerConfig, cache_dir: Path) -> dict[str, Any]:
    chosen = _sources(config)
    if not chosen:
        raise DataFormatError("dataset", "no training data: set dataset (hub id), local_datasets (file paths) or s3")
    if len(chosen) > 1:
        raise DataFormatError(chosen[1], f"{' and '.join(chosen)} are both set; give exactly one data source")
    if config.streaming and chosen[0] != "dataset":
        raise DataFormatError("streaming", "streaming works with hub datasets only; set streaming=false for local or S3 data")
    if chosen[0] == "local_datasets":
        return {"train": load_local_files(config.local_datasets, "local_datasets", cache_dir)}
    if chosen[0] == "s3":
        return _load_s3(config, cache_dir)
    return _load_hub(config, cache_dir)


def load_local_files(files: list[str], field: str, cache_dir: Path) -> Any:
    """One Dataset from local data files (each loaded with its own builder, then joined)."""
    import datasets

    parts = []
    for name in files:
        path = Path(name).expanduser()
        builder = DATA_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataFormatError(field, f"{path.name}: unsupported file type; use {sorted(DATA_BUILDERS)}")
        if not path.is_file():
            raise DataFormatError(field, f"{path} does not exist or is not a file")
        try:
            parts.append(datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache_dir)))
        except Exception as exc:  # the builders raise many types for unreadable files
            raise DataFormatError(field, f"cannot read {path.name} as {builder}: {exc}") from exc
    return _concatenate(parts, [Path(f).name for f in files], field)


def _concatenate(parts: list[Any], names: list[str], field: str) -> Any:
    import datasets

    if len(parts) == 1:
        return parts[0]
    first = set(parts[0].column_names)
    for name, part in zip(names[1:], parts[1:]):
        if set(part.column_names) != first:
            raise DataFormatError(field, f"{name} has columns {part.column_names} but {names[0]} has {parts[0].column_names}; the files must share their columns")
    try:
        return datasets.concatenate_datasets(parts)
    except ValueError as exc:
        raise DataFormatError(field, f"the files cannot be combined: {exc}") from exc


def _load_hub(config: WorkerConfig, cache_dir: Path) -> dict[str, Any]:
    import datasets

    name = config.dataset
    # `trust_remote_code` is not passed: `datasets` no longer runs loading scripts at all.
    try:
        loaded = datasets.load_dataset(name, config.subset, token=config.hf_token or None,
                                       streaming=config.streaming, cache_dir=str(cache_dir))
    except Exception as exc:  # network, auth, missing dataset or subset: all end the run here
        raise DataFormatError("dataset", f"cannot load '{name}' from the hub: {exc}") from exc
    splits = dict(loaded) if isinstance(loaded, dict) else {"train": loaded}
    if config.streaming:
        return _materialise_stream(splits, config)
    return splits


def _materialise_stream(splits: dict[str, Any], config: WorkerConfig) -> dict[str, Any]:
    """Read only the rows a run needs from a streamed dataset, as ordinary Datasets."""
    import datasets

    if config.slice_end is None:
        raise DataFormatError("slice_end", "streaming reads only a slice of the dataset; set slice_end (and optionally slice_start) to the rows to train on")
    start, end = int(config.slice_start or 0), int(config.slice_end)
    train_name = config.train_split
    out = {}
    for name, stream in splits.items():
        if name == train_name:
            rows = list(itertools.islice(stream, start, end))
        elif _wants_eval(config) and name in ({config.eval_split} | set(EVAL_SPLIT_NAMES)):
            rows = list(itertools.islice(stream, STREAMED_EVAL_ROWS))
        else:
            continue
        if not rows:
            raise DataFormatError("slice_start", f"the streamed split '{name}' has no rows in the requested slice")
        out[name] = datasets.Dataset.from_list(rows)
    return out


def _load_s3(config: WorkerConfig, cache_dir: Path) -> dict[str, Any]:
    """Download the prefix's data files into a temp folder and load them as local data."""
    folder = Path(tempfile.mkdtemp(prefix="tunelab-s3-"))
    try:
        download_s3_prefix(config.s3, folder)
        # `datasets` copies the rows into its own Arrow cache, so the download can go.
        return load_folder(folder, "s3", cache_dir)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def download_s3_prefix(s3: WorkerS3Source, folder: Path) -> list[Path]:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = s3.bucket, s3.prefix
    fetched, skipped = [], []
    try:
        # Inside the try: building the client can refuse the settings too (credentials, region).
        client = boto3.client(
            "s3", region_name=s3.region, endpoint_url=s3.endpoint_url,
            aws_access_key_id=s3.access_key_id, aws_secret_access_key=s3.secret_access_key,
            aws_session_token=s3.session_token,
        )
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if Path(key).suffix.lower() not in DATA_BUILDERS:
                    skipped.append(key)
                    continue
                relative = key[len(prefix):].lstrip("/") or Path(key).name
                target = folder / relative
                if not str(target.resolve()).startswith(str(folder.resolve()) + os.sep):
                    skipped.append(key)  # a key like "../x" must not escape the temp folder
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, key, str(target))
                fetched.append(target)
    except (BotoCoreError, ClientError) as exc:
        raise DataFormatError("s3", f"cannot read s3://{bucket}/{prefix}: {exc}") from exc
    if not fetched:
        seen = f"; found only {skipped[:5]}" if skipped else ""
        raise DataFormatError("s3", f"no data files ({', '.join(sorted(DATA_BUILDERS))}) under s3://{bucket}/{prefix}{seen}")
    return fetched


def load_folder(folder: Path, field: str, cache_dir: Path) -> dict[str, Any]:
    """Splits from a folder of data files; file names like train/validation/test name them."""
    import datasets

    kinds = {DATA_BUILDERS[p.suffix.lower()] for p in folder.rglob("*") if p.suffix.lower() in DATA_BUILDERS}
    if len(kinds) > 1:
        raise DataFormatError(field, f"the data files mix formats {sorted(kinds)}; keep one kind of file per dataset")
    try:
        return dict(datasets.load_dataset(str(folder), cache_dir=str(cache_dir)))
    except Exception as exc:  # the builders raise many types for unreadable files
        raise DataFormatError(field, f"cannot load the data files: {exc}") from exc


def _slice(train: Any, config: WorkerConfig) -> Any:
    start, end = config.slice_start, config.slice_end
    if start is None and end is None:
        return train
    start = int(start or 0)
    end = len(train) if end is None else min(int(end), len(train))
    if start >= end:
        raise DataFormatError("slice_start", f"slice {start}:{config.slice_end} selects no rows; the training split has {len(train)} rows")
    return train.select(range(start, end))


def _choose_eval(splits: dict[str, Any], train_name: str, config: WorkerConfig, cache_dir: Path) -> Any | None:
    if not _wants_eval(config):
        return None
    wanted = config.eval_split
    if wanted:
        if wanted not in splits:
            hint = " (local files have one split; use local_eval_datasets for eval files)" if config.local_datasets else ""
            raise DataFormatError("eval_split", f"the dataset has no split '{wanted}'; it has {sorted(splits)}{hint}")
        return splits[wanted]
    if config.local_eval_datasets:
        return load_local_files(config.local_eval_datasets, "local_eval_datasets", cache_dir)
    for name in EVAL_SPLIT_NAMES:
        if name in splits and name != train_name:
            return splits[name]
    return None


def _hold_out(train: Any, config: WorkerConfig) -> tuple[Any, Any]:
    share = config.eval_holdout or DEFAULT_HOLDOUT
    if len(train) < 2:
        raise DataFormatError("eval_steps", f"evaluation needs held-out rows but the training data has {len(train)} row(s); add local_eval_datasets or set eval_steps=0")
    n_eval = max(1, round(len(train) * share))
    parts = train.train_test_split(test_size=n_eval, seed=config.seed, shuffle=True)
    return parts["train"], parts["test"]


def _apply_column_mapping(data: Any, mapping: dict[str, str], what: str) -> Any:
    """Rename dataset columns onto canonical names (mapping is canonical -> dataset column)."""
    renames = {}
    for canonical, column in mapping.items():
        if column == canonical:
            continue
        if column not in data.column_names:
            raise DataFormatError("column_mapping", f"column '{column}' (mapped to {canonical}) is not in the {what}; its columns are {data.column_names}")
        renames[column] = canonical
    clashes = [c for c in renames.values() if c in data.column_names and c not in renames]
    if clashes:
        data = data.remove_columns(clashes)  # the mapped column replaces a same-named one
    return data.rename_columns(renames) if renames else data


def _name_text_column(data: Any, fmt: str) -> Any:
    if fmt == "text" and "text" not in data.column_names and len(data.column_names) == 1:
        return data.rename_column(data.column_names[0], "text")
    return data


def _sample(data: Any) -> list[dict[str, Any]]:
    return [data[i] for i in range(min(DETECTION_SAMPLE_ROWS, len(data)))]
