"""Who owns a running run, and which device it trains on: `fcntl.flock` locks on files
beside the run database (`<home>/locks/`).

A process that trains a run holds, for the run's whole life:
- an owner lock, `run-<pid>-<random>.lock`, named in the run's row (`owner_lock`, with
  `owner_pid` and `owner_started_at`). A server starting up closes a `running` row only
  when it can take that lock: the kernel drops a flock when its process dies, however
  it dies, so a crashed owner never looks alive, and a live `tunelab train` in another
  terminal is never closed under it. The lock is taken before the row exists, so there
  is no moment in which the row is running with nobody holding its lock.
- one device lock per device, `device-cpu.lock` or `device-gpu-<pin>.lock` (`lock_file`):
  a second start on the same home and device is refused, naming the run that holds it.
The files also hold a line of JSON (pid, run id, start time) for messages and for a
person looking at the folder; the lock, not the text, decides.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from tunelab.orchestrator.errors import PersistError, RunActive

CPU_DEVICE = "cpu"
# What a device name may hold as is in a lock file's name; anything else is %XX-escaped.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Longest escaped name kept readable; a longer one is hashed (file names stop at 255 bytes).
LONGEST_NAME = 160


class DeviceBusy(RunActive):
    """Another run (in this or another process) is training on the device."""

    def __init__(self, device: str, holder: dict[str, Any]):
        self.device = device
        self.holder = holder
        run_id, pid = holder.get("run_id"), holder.get("pid")
        who = f"run {run_id}" if run_id is not None else "another run that is starting"
        where = f" (process {pid})" if pid else ""
        super().__init__(f"{who}{where} is training on {device} with this tunelab home; stop it or wait for it "
                         f"to finish, or choose another device with gpu_ids")


def lock_file(locks_dir: Path, device: str) -> Path:
    """The lock file of `device`. A device name is a GPU's pin, which can be a MIG id of
    the old form `MIG-GPU-<uuid>/<gi>/<ci>`: every byte outside [A-Za-z0-9_.-] is escaped as
    %XX, so the name stays one file in `locks_dir`, the same for the same device in every
    process, and different for different devices; a name too long for a file is hashed."""
    if PLAIN_NAME.fullmatch(device):
        name = device
    else:
        name = "".join(ch if PLAIN_NAME.fullmatch(ch) else "".join(f"%{b:02X}" for b in ch.encode()) for ch in device)
    if len(name) > LONGEST_NAME:
        name = f"{name[:40]}~{hashlib.sha256(device.encode()).hexdigest()}"
    return locks_dir / f"device-{name}.lock"


def devices_of(env: dict[str, str]) -> list[str]:
    """The devices a run's child environment pins it to: its GPUs, else the CPU."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not visible:
        return [CPU_DEVICE]
    return [f"gpu-{index.strip()}" for index in visible.split(",") if index.strip()]


@functools.lru_cache(maxsize=8)
def process_started_at(pid: int) -> float:
    """When a process started (Unix seconds): with the pid it tells a reused pid apart."""
    import psutil

    return psutil.Process(pid).create_time()


def _try_lock(path: Path, create: bool) -> int | None:
    """An open descriptor holding an exclusive flock on `path`, or None when someone else
    holds it. Without `create`, a missing file raises FileNotFoundError."""
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_note(fd: int, note: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(note) + "\n").encode(), 0)


def _read_note(path: Path) -> dict[str, Any]:
    try:
        note = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


def owner_is_alive(locks_dir: Path, owner_lock: str | None) -> bool:
    """True while the process that recorded `owner_lock` for a run still holds it."""
    if not owner_lock or "/" in owner_lock or owner_lock.startswith("."):
        return False  # rows from before owners were recorded, or a name that is not ours
    try:
        fd = _try_lock(locks_dir / owner_lock, create=False)
    except FileNotFoundError:
        return False
    if fd is None:
        return True
    os.close(fd)  # we got it, so nobody holds it; closing lets it go again
    return False


def device_holder(locks_dir: Path, device: str) -> dict[str, Any] | None:
    """The note of whoever trains on `device` with this home (a run's pid and id), or None
    when nobody does. Others (inference) use it to keep off a device a run needs."""
    path = lock_file(locks_dir, device)
    try:
        fd = _try_lock(path, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if fd is None:
        return _read_note(path)
    os.close(fd)  # we got it, so nobody holds it; closing lets it go again
    return None


class RunClaim:
    """The locks one run holds: its owner lock and its devices. `release()` at finalize."""

    def __init__(self, locks_dir: Path, devices: list[str]):
        self.pid = os.getpid()
        self.started_at = process_started_at(self.pid)
        self.devices = list(devices)
        self._dir = locks_dir
        self._fds: list[int] = []
        self.owner_lock: str | None = None  # the owner lock's file name, once held
        try:
            for device in self.devices:
                path = lock_file(locks_dir, device)
                fd = _try_lock(path, create=True)
                if fd is None:
                    raise DeviceBusy(device, _read_note(path))
                self._fds.append(fd)
                _write_note(fd, self._note(None))
            name = f"run-{self.pid}-{secrets.token_hex(4)}.lock"
            fd = _try_lock(locks_dir / name, create=True)
            if fd is None:  # a fresh random name: only a stray file could be held
                raise RunActive(f"the run owner lock {name} is held by someone else; try again")
            self._fds.append(fd)
            self.owner_lock = name
            _write_note(fd, self._note(None))
        except OSError as exc:
            self.release()
            raise PersistError(f"the lock files in {locks_dir} cannot be used ({exc}); nothing was started") from exc
        except BaseException:
            self.release()
            raise

    def _note(self, run_id: int | None) -> dict[str, Any]:
        return {"pid": self.pid, "run_id": run_id, "process_started_at": self.started_at, "claimed_at": time.time()}

    def record_run(self, run_id: int) -> None:
        """Name the run in the lock files (for the message a refused start prints). Only a
        note: the locks already hold, so a failed write changes nothing that matters."""
        for fd in self._fds:
            try:
                _write_note(fd, self._note(run_id))
            except OSError:
                pass

    def release(self) -> None:
        fds, self._fds = self._fds, []
        owner, self.owner_lock = self.owner_lock, None
        if owner:
            # Unlinked while still locked: a checker that opens it afterwards finds no file,
            # which reads as "owner gone" — true from this moment.
            try:
                (self._dir / owner).unlink()
            except OSError:
                pass
        for fd in fds:
            os.close(fd)  # closing the descriptor drops its flock
