"""The Ray engine of the launcher (launcher.py): a run's ranks as Ray Train workers.

The launcher starts the Ray driver (ray/driver.py) as its own child process — in its own
session, killed by the kernel when this worker dies — and talks to it in JSON lines over
the driver's stdin and stdout:
1. to the driver: the run's config. It travels through a pipe, never a file: it carries
   the run's secrets, and on to the Ray workers only inside Ray Train's
   `train_loop_config` (see ray/driver.py for what that means on the cluster);
2. from the driver: `imported`, then `connected` with the address of this machine the
   Ray workers can reach (loopback when every node of the cluster is this machine,
   otherwise this node's IP as Ray sees it); the launcher opens the event channel there;
3. to the driver: the channel's address and secret; the driver starts Ray Train;
4. from the driver: `finished`, or `failure` naming the rank that failed first and why.
A cluster that does not answer within CONNECT_TIMEOUT_S fails the run with an error naming
`ray_address`, rather than waiting as long as Ray would. Ray Train's own files go to
`<output_dir>/distributed/ray`; the driver's output, with the workers' logs Ray forwards
to it, to `<output_dir>/distributed/ray.log`.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tunelab import events, layout
from tunelab.worker.context import RunSettingError
from tunelab.worker.launch.engine import Launch, ProcessEngine
from tunelab.worker.run_config import WorkerConfig

DRIVER_MODULE = "tunelab.worker.launch.ray.driver"
# Importing ray in the driver, before the connect timer starts, may take a while on a busy machine.
IMPORT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = float(os.environ.get("TUNELAB_RAY_CONNECT_TIMEOUT_S") or 30.0)
PROBE_TIMEOUT_S = 5.0
# The launcher's settings that change how a rank reaches the hub; a Ray worker otherwise
# runs in its node's own environment (the one `ray start` had there).
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_XET")
NOT_INSTALLED = layout.RAY_NOT_INSTALLED


def unreachable(address: str, why: str) -> str:
    return (f"the Ray cluster at {address!r} cannot be reached ({why}); start it with `ray start --head` on the "
            "head node, give its address as host:port (e.g. 10.0.0.1:6379) or `auto` on a node of the cluster, "
            "or remove ray_address to train on this machine")


class RayEngine(ProcessEngine):
    what = "the Ray driver"

    def __init__(self, plan: layout.Layout, config: WorkerConfig, folder: Path):
        super().__init__(folder / "ray.log")
        self.plan, self.config, self.folder = plan, config, folder
        self.address = str(config.ray_address)
        self._said: queue.Queue[dict[str, Any]] = queue.Queue()
        self._failure: tuple[int, str] | None = None

    def start(self, launch: Launch) -> None:
        probe_cluster(self.address)
        # Ray Train's files of an earlier attempt in this folder (a resume) are not ours to continue.
        shutil.rmtree(self.folder / "ray", ignore_errors=True)
        launch.ctx.emit(events.status(f"Connecting to the Ray cluster at {self.address}"))
        process = self.popen([sys.executable, "-u", "-m", DRIVER_MODULE], dict(os.environ),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        threading.Thread(target=self._read, args=(process.stdout,), name="tunelab-ray-driver", daemon=True).start()
        request = {"config": self.config.payload(), "address": self.address, "workers": self.plan.processes_per_node,
                   "use_gpu": bool(self.config.num_gpus), "storage_path": str(self.folder / "ray"),
                   "env": {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}}
        self._tell(request)
        self._expect("imported", launch, IMPORT_TIMEOUT_S)
        connected = self._expect("connected", launch, CONNECT_TIMEOUT_S)
        if connected is None:
            return  # stopped while connecting
        self._tell({"channel": launch.open_channel(str(connected["channel_host"]))})
        plan = self.plan
        launch.ctx.emit(events.status(f"Starting {plan.world_size} training workers with Ray Train on the cluster at "
                                      f"{self.address} ({connected['nodes']} nodes; {plan.strategy})"))

    def _tell(self, message: dict[str, Any]) -> None:
        process = self.process
        assert process is not None and process.stdin is not None
        try:
            process.stdin.write((json.dumps(message) + "\n").encode())
            process.stdin.flush()
        except OSError:
            pass  # the driver is gone; what it said before tells why

    def _read(self, stream: Any) -> None:
        for line in stream:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                if "failure" in message:
                    failure = message["failure"]
                    self._failure = (int(failure.get("rank") or 0), str(failure.get("reason")))
                self._said.put(message)

    def _expect(self, what: str, launch: Launch, timeout_s: float) -> dict[str, Any] | None:
        """The driver's `what` message; None when the launch was stopped meanwhile. A
        driver that fails, ends or takes too long raises the setting error to show."""
        deadline = time.monotonic() + timeout_s
        while True:
            if launch.ended_because:
                return None
            try:
                message = self._said.get(timeout=0.1)
            except queue.Empty:
                if self.poll() is not None and self._said.empty():
                    raise RunSettingError("ray_address", f"the Ray driver ended before it {_doing(what)}; see {self.log_path}")
                if time.monotonic() > deadline:
                    self.kill()
                    raise RunSettingError("ray_address", unreachable(self.address, f"no answer within {timeout_s:.0f} s")
                                          if what == "connected" else f"importing Ray took over {timeout_s:.0f} s; see {self.log_path}")
                continue
            if "error" in message:
                raise RunSettingError("ray_address", str(message["error"]))
            if what in message:
                return message[what] if isinstance(message[what], dict) else message

    def first_failure(self) -> tuple[int, str] | None:
        return self._failure

    def cleanup(self) -> None:
        process = self.process
        if process is not None and process.stdin is not None:
            try:
                process.stdin.close()
            except OSError:
                pass
        self.kill()


def _doing(what: str) -> str:
    return {"imported": "imported Ray", "connected": "connected to the cluster"}.get(what, what)


def probe_cluster(address: str) -> None:
    """Fail at once, naming the setting, when nothing listens at host:port (`auto` and
    `ray://` addresses are left to Ray)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or address.startswith("ray://"):
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise RunSettingError("ray_address", unreachable(address, exc.strerror or type(exc).__name__)) from None
