"""The codec cache of a text-to-speech run: every clip encoded once, kept beside the run.

`<output_dir>/codec_cache/<split>-<key>.json` holds one split's audio offsets
(tts_layout), one list per row — or, for a row `skip_bad_audio` left out, the reason as
a string (so a resumed run reports the same skipped rows without reading a clip). The key is a hash over the codec (its files' hash and
rate), the dataset (each local data file's bytes, or a hub dataset's fingerprint) and the
split's clip references (paths, or the hash of embedded bytes): a resumed run — which
writes into the same folder — finds the file and encodes nothing; any change to the
codec, the data or the split (slice, holdout) makes a new key. Written whole under a
temporary name and renamed, so a run killed mid-write leaves no half file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

CACHE_FOLDER = "codec_cache"


def dataset_fingerprint(config: WorkerConfig, rows: Any) -> str:
    digest = hashlib.sha256()
    files = list(config.local_datasets) + list(config.local_eval_datasets)
    for name in files:
        with open(Path(name).expanduser(), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    if not files:
        digest.update(str(getattr(rows, "_fingerprint", "")).encode())
    return digest.hexdigest()


def cache_key(codec_fingerprint: str, codec_rate: int, data_fingerprint: str, refs: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(f"{codec_fingerprint}|{codec_rate}|{data_fingerprint}|".encode())
    for ref in refs:
        digest.update((hashlib.sha256(ref["bytes"]).hexdigest() if ref.get("bytes") else str(ref.get("path"))).encode() + b"\n")
    return digest.hexdigest()[:32]


def cache_file(output_dir: Path, what: str, key: str) -> Path:
    return Path(output_dir) / CACHE_FOLDER / f"{what}-{key}.json"


def load(path: Path, rows: int) -> list[list[int] | str] | None:
    """The cached offsets, or None when absent or not a whole cache of `rows` rows."""
    try:
        codes = json.loads(path.read_text())["codes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return codes if isinstance(codes, list) and len(codes) == rows else None


def save(path: Path, codes: list[list[int] | str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    draft.write_text(json.dumps({"codes": codes}))
    os.replace(draft, path)
