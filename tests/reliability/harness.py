"""What the reliability suite and `bench/reliability.py` share: live servers, processes,
streams and waits.

Servers are the server tests' own (`tests/server/conftest.py`, loaded here under its own
module name so its launcher and fixtures are reused, not copied). A server can be told
to run a scripted fake worker instead of the trainer (`worker_env`), which it then
spawns exactly like the real one. `StreamRecorder` reads the progress stream on a thread
and timestamps every event on arrival, so a test can act when a stage begins and later
compare what was streamed with what was stored.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil

TESTS_DIR = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Helpers of the server and orchestrator tests, and checkpoint_factory, importable by name.
HELPER_DIRS = [HERE, TESTS_DIR / "server", TESTS_DIR / "orchestrator", TESTS_DIR]
for _folder in reversed(HELPER_DIRS):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from sse_helpers import Sse, iter_sse  # noqa: E402

WAIT_S = 120
FINAL_PHASES = ("completed", "stopped", "error")


def load_server_harness() -> Any:
    """tests/server/conftest.py as the module `server_harness` (loaded once)."""
    if "server_harness" in sys.modules:
        return sys.modules["server_harness"]
    spec = importlib.util.spec_from_file_location("server_harness", TESTS_DIR / "server" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["server_harness"] = module
    spec.loader.exec_module(module)
    return module


def worker_env(target: str | None = None, **extra: str) -> dict[str, str]:
    """Server environment that makes its runs use `target` ("module:function" from this
    folder or the orchestrator tests' scripted workers), plus any other variables."""
    env = {key: str(value) for key, value in extra.items()}
    python_path = [str(folder) for folder in HELPER_DIRS]
    if os.environ.get("PYTHONPATH"):
        python_path.append(os.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(python_path)
    if target:
        env["TUNELAB_WORKER_TARGET"] = target
        # A prewarmed spare imports torch & co (seconds of CPU) for a trainer these runs never use.
        env.setdefault("TUNELAB_PREWARM", "0")
    return env


# --- processes ---------------------------------------------------------------------------
def is_resource_tracker(process: psutil.Process) -> bool:
    """multiprocessing's helper that every spawn-using parent keeps; it is not a worker."""
    try:
        return "resource_tracker" in " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def worker_processes(server_pid: int) -> list[psutil.Process]:
    """Every live descendant of the server except multiprocessing's resource tracker."""
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in children if is_alive(p) and not is_resource_tracker(p)]


def is_alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (empty when it is already gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def all_gone(processes: list[psutil.Process]) -> bool:
    return not any(is_alive(p) for p in processes)


def leftover_workers(server_pid: int, run_worker_pids: set[int]) -> list[psutil.Process]:
    """Live server descendants that are, or descend from, a run's worker. (A prewarmed
    spare that never took a job, and the resource tracker, are not leftovers.)"""
    leftovers = []
    for process in worker_processes(server_pid):
        try:
            lineage = {process.pid, *(p.pid for p in process.parents())}
        except psutil.NoSuchProcess:
            continue
        if lineage & run_worker_pids:
            leftovers.append(process)
    return leftovers


def wait_until(condition: Callable[[], Any], timeout: float = WAIT_S, poll: float = 0.02) -> Any:
    """Poll `condition` until it returns something truthy; that value, or None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(poll)


# --- the API -----------------------------------------------------------------------------
def start_run(client: httpx.Client, body: dict[str, Any]) -> int:
    response = client.post("/api/train/start", json=body)
    assert response.status_code == 200, response.text
    return response.json()["job_id"]


def run_row(client: httpx.Client, run_id: int) -> dict[str, Any]:
    response = client.get(f"/api/runs/{run_id}")
    assert response.status_code == 200, response.text
    return response.json()


def wait_run_ended(client: httpx.Client, run_id: int, timeout: float = WAIT_S) -> dict[str, Any]:
    """The stored run once it is no longer `running` (and the live state agrees)."""

    def ended() -> dict[str, Any] | None:
        row = run_row(client, run_id)
        if row["status"] == "running":
            return None
        status = client.get("/api/train/status").json()
        if status.get("run_id") == run_id and status["phase"] not in FINAL_PHASES:
            return None
        return row

    row = wait_until(ended, timeout, poll=0.05)
    assert row is not None, f"run {run_id} did not end within {timeout} s"
    return row


def worker_pid(client: httpx.Client) -> int | None:
    return client.get("/api/train/status").json().get("worker_pid")


# --- the progress stream -----------------------------------------------------------------
class StreamRecorder:
    """One SSE client on a thread: every event with its arrival time, until the run's end."""

    def __init__(self, base_url: str, token: str, params: dict[str, Any] | None = None):
        self.base_url, self.token, self.params = base_url, token, params or {}
        self.events: list[tuple[float, Sse]] = []
        self.subscribed = threading.Event()
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True, name="stream-recorder")

    def start(self, timeout: float = 30) -> "StreamRecorder":
        self._thread.start()
        assert self.subscribed.wait(timeout), f"the progress stream did not open: {self.error!r}"
        return self

    def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx.stream("GET", self.base_url + "/api/train/progress", headers=headers, params=self.params,
                              timeout=httpx.Timeout(10, read=60)) as response:
                for event in iter_sse(response):
                    with self._cond:
                        self.events.append((time.time(), event))
                        self._cond.notify_all()
                    if event.retry is not None:
                        self.subscribed.set()  # the stream sends `retry:` once it has subscribed
                    if event.event in ("complete", "error"):
                        break
        except BaseException as exc:  # noqa: BLE001 - reported to the test through .error
            self.error = exc
        finally:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[Sse], bool], timeout: float = WAIT_S) -> Sse | None:
        """The first event matching `predicate` (None if the stream ended or time ran out)."""

        def found() -> Sse | None:
            return next((e for _, e in self.events if predicate(e)), None)

        deadline = time.monotonic() + timeout
        with self._cond:
            while (hit := found()) is None and self._thread.is_alive() and time.monotonic() < deadline:
                self._cond.wait(0.1)
        return hit

    def join(self, timeout: float = WAIT_S) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the progress stream did not end"

    def progress_steps(self) -> list[int]:
        return [e.data["step"] for _, e in self.events if e.event == "progress"]

    def final(self) -> Sse | None:
        return next((e for _, e in reversed(self.events) if e.event in ("complete", "error")), None)


def watch_next_run(server: Any) -> StreamRecorder:
    """A recorder that follows the next run from its first event. The server is reset to
    idle first: a stream opened after a run ended only repeats that run's end."""
    with server.client() as client:
        if client.get("/api/train/status").json()["phase"] in FINAL_PHASES:
            reset = client.post("/api/train/reset")
            assert reset.status_code == 200, reset.text
    return StreamRecorder(server.base_url, server.token).start()


def is_stage(*stages: str) -> Callable[[Sse], bool]:
    return lambda e: e.event == "status" and e.data.get("stage") in stages


def is_step_at_least(step: int) -> Callable[[Sse], bool]:
    return lambda e: e.event == "progress" and e.data["step"] >= step


def is_final(e: Sse) -> bool:
    return e.event in ("complete", "error")


# --- faults from outside -----------------------------------------------------------------
LOCK_SCRIPT = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
print("released", flush=True)
"""


def hold_database_lock(db_path: Path, seconds: float) -> subprocess.Popen:
    """Another process takes the run database's write lock and keeps it for `seconds`;
    returns once the lock is held."""
    process = subprocess.Popen([sys.executable, "-c", LOCK_SCRIPT, str(db_path), str(seconds)],
                               stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.strip() == "locked", f"the locker did not get the lock: {line!r}"
    return process
