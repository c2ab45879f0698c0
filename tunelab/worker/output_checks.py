"""Saying so when a run failed because its output folder cannot take the writes.

Libraries hide that cause: PyTorch's checkpoint writer reports a full disk as
"enforce fail at inline_container.cc ... unexpected pos", safetensors wraps the system
error in its own. When a run fails, `explain_output_failure` looks for the real cause —
a system error about the output folder in the exception chain, or else a small probe
write into the folder that fails — and words it as a setting error that names
`output_dir` and the fix. It returns None when the folder is not the problem. Torch-free.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from tunelab import paths

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
PROBE_NAME = ".tunelab-write-probe"
PROBE_BYTES = 1 << 20
CHAIN_LIMIT = 10


def explain_output_failure(output_dir: str | None, exc: BaseException) -> str | None:
    if not output_dir:
        return None
    folder = Path(output_dir)
    code = _errno_about(folder, exc)
    if code is None and paths.is_dir(folder):
        code = _probe_write(folder)
    if code in DISK_FULL:
        return (f"output_dir: the disk holding {folder} ran out of space ({_free(folder)} free now); "
                "free some space there or choose an output_dir on another disk")
    if code in NOT_WRITABLE:
        return (f"output_dir: {folder} cannot be written ({os.strerror(code)}); "
                "choose a writable output_dir or fix the folder's permissions")
    return None


def _errno_about(folder: Path, exc: BaseException) -> int | None:
    """The errno of a disk error about `folder` (or a path inside it or above it)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < CHAIN_LIMIT:
        if isinstance(current, OSError) and current.errno in DISK_FULL | NOT_WRITABLE and current.filename:
            path = Path(os.fsdecode(current.filename)).absolute()
            if path == folder or folder in path.parents or path in folder.parents:
                return current.errno
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def _probe_write(folder: Path) -> int | None:
    probe = folder / PROBE_NAME
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        return exc.errno if exc.errno in DISK_FULL | NOT_WRITABLE else None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return None


def _free(folder: Path) -> str:
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB"
    except OSError:
        return "unknown space"
