"""Output folders that cannot be written: read-only, or full. Shared by the suite and
bench/reliability.py; each context manager yields how it made the fault, in words.

A real fault is preferred to an imitation, in this order:
  read-only  a non-root user gets a folder with mode 0555 (root ignores modes, so root
             mounts a read-only tmpfs there instead);
  full       a 256 KiB tmpfs mounted there (needs root), which the first checkpoint
             overflows; without mount rights, the path of the first checkpoint is
             taken by a file, so the save fails at the same point for another reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

# Room for the run's dataset caches (about 200 KB for the demo data), which live in its
# folder, but not for its first checkpoint (about 600 KB).
FULL_TMPFS_SIZE = "512k"


def _mount_tmpfs(folder: Path, options: str) -> bool:
    if os.geteuid() != 0:
        return False
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    return result.returncode == 0


def _unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@contextlib.contextmanager
def read_only_folder(folder: Path) -> Iterator[str | None]:
    """`folder` made unwritable; yields how (None when this machine allows no way)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield "a folder with mode 0555 (non-root user)"
        finally:
            folder.chmod(0o755)
    elif _mount_tmpfs(folder, "ro,size=64k"):
        try:
            yield "a read-only tmpfs mounted on the folder (root ignores file modes)"
        finally:
            _unmount(folder)
    else:
        yield None


@contextlib.contextmanager
def full_folder(folder: Path, first_checkpoint: str) -> Iterator[str]:
    """`folder` that fills up at the first checkpoint; yields how."""
    folder.mkdir(parents=True, exist_ok=True)
    if _mount_tmpfs(folder, f"size={FULL_TMPFS_SIZE}"):
        try:
            yield f"a {FULL_TMPFS_SIZE}B tmpfs mounted on the folder, filled by the first checkpoint"
        finally:
            _unmount(folder)
        return
    blocker = folder / first_checkpoint
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("this file takes the checkpoint's place\n")
    yield f"no mount rights: the path of {first_checkpoint} is taken by a file"
