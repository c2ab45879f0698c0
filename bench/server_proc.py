"""A real tunelab server for the benchmarks: launched as its own process on a free
loopback port with a temporary home, spoken to over HTTP and SSE like any client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import httpx
import psutil

BENCH = Path(__file__).resolve().parent
TOKEN = "bench-token"
STARTUP_LIMIT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    base_url: str
    home: Path
    launched: float  # time.monotonic() just before the launch

    def client(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def wait_until_warm(self, timeout: float = 300) -> None:
        """Until the server's children (the prewarmed worker) have gone idle: their
        imports are done. Waiting keeps that work out of whatever is measured next."""
        deadline = time.monotonic() + timeout
        last, idle_since = None, time.monotonic()
        while time.monotonic() < deadline:
            try:
                children = psutil.Process(self.process.pid).children(recursive=True)
                used = sum(sum(c.cpu_times()[:2]) for c in children)
            except psutil.Error:
                used = None
            if used != last:
                last, idle_since = used, time.monotonic()
            elif time.monotonic() - idle_since > 0.6:
                return
            time.sleep(0.1)
        raise RuntimeError("the server's worker processes never went idle")


def launch(extra_env: dict[str, str] | None = None, data_root: Path | None = None,
           command: list[str] | None = None) -> Server:
    """Start `python -m tunelab.server` (or `command`, with {port} filled in) and wait for /api/health."""
    home = Path(tempfile.mkdtemp(prefix="bench-home-"))
    port = free_port()
    env = {**os.environ, "TUNELAB_HOME": str(home), "TUNELAB_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))}
    if data_root is not None:
        env["TUNELAB_DATA_ROOTS"] = str(data_root)
    env.update(extra_env or {})
    argv = [part.format(port=port) for part in command] if command else [
        sys.executable, "-m", "tunelab.server", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    launched = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=open(home / "stderr.log", "w"))
    server = Server(process, f"http://127.0.0.1:{port}", home, launched)
    deadline = launched + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {(home / 'stderr.log').read_text()[-2000:]}")
        try:
            if httpx.get(server.base_url + "/api/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.01)
    server.stop()
    raise RuntimeError("the server did not answer /api/health")


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any], float]]:
    """(event name, data, arrival time.time()) for each event in the lines of an SSE stream."""
    name, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data)), time.time()
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
