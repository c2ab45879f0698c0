"""Deciding whether a checkpoint folder can be resumed from, without trusting its files.

A run's checkpoints are `output_dir/checkpoint-N/` (HF Trainer layout; the MLX backend
writes the same shape). One is valid when `trainer_state.json` says `global_step == N`,
its weights file exists and opens, and optimizer and scheduler state are present.
`tmp-checkpoint-N/` is a save that never finished and is never valid.

Files are checked by their structure only. Pickle-based files (`*.bin`, `*.pt`) are
NEVER unpickled: loading a pickle runs code chosen by whoever wrote the file. This
module imports neither torch nor safetensors, so the server can use it.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")
# The Trainer saves one RNG state per rank: `rng_state.pth` alone, `rng_state_<rank>.pth` in a multi-rank run.
RANK_RNG_NAME = re.compile(r"rng_state_(\d+)\.pth")
PARTIAL_NAME = re.compile(r"tmp-checkpoint-(\d+)")

# Weights files in the order they are looked for, with the kind of checkpoint each means.
WEIGHT_FILES = (
    ("adapter_model.safetensors", "adapter"),
    ("adapter_model.bin", "adapter"),
    ("adapters.safetensors", "mlx"),
    ("model.safetensors", "full"),
    ("model.safetensors.index.json", "full"),
    ("pytorch_model.bin", "full"),
    ("pytorch_model.bin.index.json", "full"),
)
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.safetensors")
SCHEDULER_FILES = ("scheduler.pt", "scheduler.json")

# A safetensors header is JSON; anything this large is a corrupt length field, not a model.
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
PICKLE_PROTOCOL_OPCODE = 0x80


class InvalidCheckpoint(ValueError):
    """A folder that cannot be resumed from; `reason` says why in plain words."""

    def __init__(self, path: str | Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path} is not a usable checkpoint: {reason}")


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    kind: str  # "adapter", "full" or "mlx"
    # How many training processes wrote it (one RNG state file each); 1 for a one-process run.
    world_size: int = 1


def validate_checkpoint(path: str | Path) -> CheckpointInfo:
    """Check one `checkpoint-N` folder; raise InvalidCheckpoint naming the first problem."""
    folder = Path(path)
    try:
        found = folder.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise InvalidCheckpoint(folder, f"the folder cannot be looked up ({exc.strerror})") from None
    if not found:
        raise InvalidCheckpoint(folder, "the folder does not exist")
    if PARTIAL_NAME.fullmatch(folder.name):
        raise InvalidCheckpoint(folder, "it is a partial save (tmp-checkpoint-N): the save did not finish")
    named = CHECKPOINT_NAME.fullmatch(folder.name)
    if not named:
        raise InvalidCheckpoint(folder, f"the folder name {folder.name!r} is not checkpoint-<step>")
    step = int(named.group(1))
    try:
        _check_trainer_state(folder, step)
        kind = _check_weights(folder)
        _check_optimizer(folder)
        _check_scheduler(folder)
    except OSError as exc:
        raise InvalidCheckpoint(folder, f"{Path(exc.filename or folder).name} cannot be read ({exc.strerror})") from None
    return CheckpointInfo(path=folder, step=step, kind=kind, world_size=_world_size(folder))


def latest_valid_checkpoint(output_dir: str | Path | None, at_most: int | None = None) -> Path | None:
    """The valid `checkpoint-N` with the highest N (no higher than `at_most`, if given) in
    a run folder, or None.

    Symlinked entries are skipped: a checkpoint must really live in the run's folder.
    A folder that cannot be looked up or listed (gone, too long a name, no permission)
    holds none: the run history must stay readable whatever a stored path says.
    """
    if not output_dir:
        return None
    found: list[tuple[int, Path]] = []
    try:
        for entry in Path(output_dir).iterdir():
            named = CHECKPOINT_NAME.fullmatch(entry.name)
            if named and entry.is_dir() and not entry.is_symlink() and (at_most is None or int(named.group(1)) <= at_most):
                found.append((int(named.group(1)), entry))
    except (OSError, ValueError):
        return None
    for _, folder in sorted(found, reverse=True):
        try:
            validate_checkpoint(folder)
        except InvalidCheckpoint:
            continue
        return folder
    return None


def _world_size(folder: Path) -> int:
    """The number of ranks that saved this checkpoint, from their RNG state files: a
    resume on another number would leave ranks without their state, or states unused."""
    try:
        ranks = sum(1 for entry in folder.iterdir() if RANK_RNG_NAME.fullmatch(entry.name))
    except OSError:
        return 1
    return max(ranks, 1)


def _check_trainer_state(folder: Path, step: int) -> None:
    state_file = folder / "trainer_state.json"
    if not state_file.is_file():
        raise InvalidCheckpoint(folder, "trainer_state.json is missing")
    try:
        state = json.loads(state_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidCheckpoint(folder, f"trainer_state.json cannot be read as JSON ({exc})") from None
    global_step = state.get("global_step") if isinstance(state, dict) else None
    if isinstance(global_step, bool) or not isinstance(global_step, int):
        raise InvalidCheckpoint(folder, "trainer_state.json has no integer global_step")
    if global_step != step:
        raise InvalidCheckpoint(folder, f"trainer_state.json says global_step {global_step} but the folder is for step {step}")


def _check_weights(folder: Path) -> str:
    for name, kind in WEIGHT_FILES:
        weights = folder / name
        if not weights.is_file():
            continue
        if name.endswith(".index.json"):
            _check_shard_index(folder, weights)
        elif name.endswith(".safetensors"):
            _check_safetensors(folder, weights, require_tensor=True)
        else:
            _check_pickle_structure(folder, weights)
        return kind
    expected = ", ".join(name for name, _ in WEIGHT_FILES)
    raise InvalidCheckpoint(folder, f"no weights file; expected one of {expected}")


def _check_shard_index(folder: Path, index_file: Path) -> None:
    try:
        index = json.loads(index_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidCheckpoint(folder, f"{index_file.name} cannot be read as JSON ({exc})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidCheckpoint(folder, f"{index_file.name} has no weight_map")
    for shard_name in sorted(set(map(str, weight_map.values()))):
        # A shard must sit next to its index; a path could point anywhere on disk.
        if Path(shard_name).name != shard_name or shard_name in ("", ".", ".."):
            raise InvalidCheckpoint(folder, f"{index_file.name} lists shard {shard_name!r}, which is not a plain file name")
        shard = folder / shard_name
        if not shard.is_file():
            raise InvalidCheckpoint(folder, f"shard {shard_name} listed in {index_file.name} is missing")
        if shard_name.endswith(".safetensors"):
            _check_safetensors(folder, shard, require_tensor=True)
        else:
            _check_pickle_structure(folder, shard)


def _check_safetensors(folder: Path, file: Path, *, require_tensor: bool) -> None:
    """Parse the safetensors header (8-byte little-endian length, then JSON) and check
    that every tensor's byte range lies inside the file, which catches truncated saves."""
    size = file.stat().st_size
    with file.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise InvalidCheckpoint(folder, f"{file.name} is too short to be a safetensors file")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len == 0 or header_len > MAX_SAFETENSORS_HEADER or 8 + header_len > size:
            raise InvalidCheckpoint(folder, f"{file.name} has a corrupt safetensors header length")
        raw_header = handle.read(header_len)
    try:
        header = json.loads(raw_header)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidCheckpoint(folder, f"{file.name} has a safetensors header that is not JSON") from None
    if not isinstance(header, dict):
        raise InvalidCheckpoint(folder, f"{file.name} has a safetensors header that is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if require_tensor and not tensors:
        raise InvalidCheckpoint(folder, f"{file.name} holds no tensors")
    data_size = size - 8 - header_len
    for name, entry in tensors.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise InvalidCheckpoint(folder, f"{file.name} describes tensor {name!r} without valid data offsets")
        if offsets[1] > data_size:
            raise InvalidCheckpoint(folder, f"{file.name} is truncated: tensor {name!r} ends past the end of the file")


def _check_pickle_structure(folder: Path, file: Path) -> None:
    """torch.save's zip format (an archive with a data.pkl entry) or a legacy pickle
    stream (protocol opcode 0x80 then a protocol number). Looked at, never loaded."""
    if zipfile.is_zipfile(file):
        try:
            with zipfile.ZipFile(file) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            raise InvalidCheckpoint(folder, f"{file.name} is a damaged zip archive ({exc})") from None
        if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise InvalidCheckpoint(folder, f"{file.name} is a zip archive without a data.pkl entry, not a torch save")
        return
    with file.open("rb") as handle:
        head = handle.read(2)
    if len(head) == 2 and head[0] == PICKLE_PROTOCOL_OPCODE and 2 <= head[1] <= 5:
        return
    if head == b"PK":
        raise InvalidCheckpoint(folder, f"{file.name} is a damaged or truncated zip archive")
    raise InvalidCheckpoint(folder, f"{file.name} is neither a torch zip archive nor a pickle file")


def _check_optimizer(folder: Path) -> None:
    for name in OPTIMIZER_FILES:
        state = folder / name
        if state.is_file():
            if name.endswith(".safetensors"):
                # An optimizer without per-parameter state (plain SGD) saves no tensors.
                _check_safetensors(folder, state, require_tensor=False)
            else:
                _check_pickle_structure(folder, state)
            return
    raise InvalidCheckpoint(folder, f"optimizer state is missing (expected {' or '.join(OPTIMIZER_FILES)})")


def _check_scheduler(folder: Path) -> None:
    for name in SCHEDULER_FILES:
        state = folder / name
        if state.is_file():
            if name.endswith(".json"):
                try:
                    json.loads(state.read_text())
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise InvalidCheckpoint(folder, f"{name} cannot be read as JSON ({exc})") from None
            else:
                _check_pickle_structure(folder, state)
            return
    raise InvalidCheckpoint(folder, f"scheduler state is missing (expected {' or '.join(SCHEDULER_FILES)})")
