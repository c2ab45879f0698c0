"""A real tunelab server for the tests: `python -m tunelab.server` in a subprocess on a
free loopback port, with its own temporary home and a known token, spoken to with httpx.

`start_server` launches one (a test may launch several, e.g. to restart on the same
home); `live_server` is one per test module for tests that do not train; `demo_run`
builds request bodies for tiny training runs on the demo model.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

TOKEN = "test-token-7f3a9c"
STARTUP_LIMIT_S = 30
# Short heartbeats so a test can see one without waiting the production 10 s.
HEARTBEAT_S = "0.3"


@dataclass
class LiveServer:
    process: subprocess.Popen
    base_url: str
    home: Path
    token: str | None
    banner: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, token: str | None = "default", timeout: float = 60.0) -> httpx.Client:
        """A client sending `token` (the server's by default; None sends no header)."""
        token = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _launch(home: Path, token: str | None, data_roots: list[Path], extra_env: dict[str, str] | None = None,
            log_level: str = "warning", extra_args: list[str] | None = None, cwd: Path | None = None) -> LiveServer:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNELAB_TOKEN", "TUNELAB_DATABASE_URL")}
    env.update(TUNELAB_HOME=str(home), TUNELAB_DATA_ROOTS=os.pathsep.join(map(str, data_roots)),
               TUNELAB_SSE_HEARTBEAT_S=HEARTBEAT_S, PYTHONUNBUFFERED="1")
    if token:
        env["TUNELAB_TOKEN"] = token
    env.update(extra_env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "tunelab.server", "--host", "127.0.0.1", "--port", "0", "--log-level", log_level,
         *(extra_args or [])],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=(home / "server-stderr.log").open("a"), text=True,
    )
    # The first line names the port the server picked (it binds before printing).
    first = process.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
    if not match:
        process.kill()
        raise RuntimeError(f"server did not announce its address: {first!r}")
    banner = [first.rstrip("\n"), process.stdout.readline().rstrip("\n")]
    server = LiveServer(process, f"http://127.0.0.1:{match.group(1)}", home, token, banner)
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.base_url + "/api/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("server did not answer /api/health")


@pytest.fixture
def start_server(tmp_path: Path, demo_assets) -> Iterator[Callable[..., LiveServer]]:
    """Launch servers (stopped at the end of the test); default home is tmp_path/home."""
    started: list[LiveServer] = []

    def start(home: Path | None = None, token: str | None = TOKEN, extra_env: dict[str, str] | None = None,
              log_level: str = "warning", extra_args: list[str] | None = None, cwd: Path | None = None) -> LiveServer:
        """`extra_args` go to `python -m tunelab.server`; `cwd` is the server's working folder."""
        home = home or tmp_path / "home"
        home.mkdir(parents=True, exist_ok=True)
        server = _launch(home, token, [demo_assets.root], extra_env, log_level, extra_args, cwd)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> Iterator[LiveServer]:
    """One server shared by a module's tests that start no training."""
    server = _launch(tmp_path_factory.mktemp("server-home"), TOKEN, [demo_assets.root])
    yield server
    server.stop()


@pytest.fixture
def server(start_server: Callable[..., LiveServer]) -> LiveServer:
    return start_server()


@pytest.fixture
def demo_run(demo_assets) -> Callable[..., dict[str, Any]]:
    """A start body for a tiny LoRA run on the demo model and alpaca data."""

    def body(**overrides: Any) -> dict[str, Any]:
        return {
            "model_name": str(demo_assets.model_dir),
            "local_datasets": [str(demo_assets.alpaca)],
            "training_type": "lora",
            "max_steps": 12,
            "max_seq_length": 128,
            "batch_size": 2,
            "gradient_accumulation_steps": 1,
            "learning_rate": 3e-3,
            "lora_r": 8,
            "lora_alpha": 16,
            **overrides,
        }

    return body
