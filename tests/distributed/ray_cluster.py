"""A throwaway local Ray cluster for tests: a head and a second worker node on loopback.

Each node is started by the `ray` CLI in a session of its own, with its own temp dir and
ports chosen free (the head's client server and each node's agent port included, so a
cluster of the user's on this machine is never joined or disturbed), and RAY_ADDRESS is
set only in the environment of what the test starts. Teardown kills every process of
those sessions (Ray's workers are group leaders of their own, but stay in the raylet's
session); it does not use `ray stop`, which ends every Ray process of the user on the
machine, whichever cluster it belongs to.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalRayCluster:
    def __init__(self, cpus_per_node: int = 1):
        self.temp_dir = Path(tempfile.mkdtemp(prefix="tlray-", dir="/tmp"))  # Ray's socket paths must stay short
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.sessions: list[int] = []
        self.cpus = cpus_per_node
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"

    def _node(self, *args: str) -> list[str]:
        return [RAY, "start", *args, "--num-cpus", str(self.cpus), "--disable-usage-stats", "--temp-dir", str(self.temp_dir),
                "--node-ip-address", "127.0.0.1", "--object-store-memory", str(100 * 1024 * 1024),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]

    def _start(self, argv: list[str]) -> None:
        process = subprocess.Popen(argv, env=self.env, start_new_session=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        self.sessions.append(process.pid)  # its daemons stay in this session after it returns
        out, _ = process.communicate(timeout=START_TIMEOUT_S)
        if process.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv[:3])}` failed:\n{out[-3000:]}")

    def start(self) -> "LocalRayCluster":
        self._start(self._node("--head", "--port", str(self.port), "--include-dashboard=false",
                               "--ray-client-server-port", str(free_port())))
        self._start(self._node("--address", self.address))
        return self

    def processes(self) -> list[int]:
        """Every live process of this cluster's sessions."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) in self.sessions:
                        found.append(int(entry))
                except OSError:
                    pass
        return found

    def workers(self, title: str = "RayTrainWorker") -> list[int]:
        """The cluster's processes whose title names `title` (Ray retitles its workers)."""
        found = []
        for pid in self.processes():
            try:
                if title in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(pid)
            except OSError:
                pass
        return found

    def stop(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = self.processes()
            if not alive:
                break
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
