"""`tunelab train` with a server running on the same home: the run goes to the server.

Real parts throughout: a `python -m tunelab.server` subprocess that made its own token
file, and the CLI as a subprocess on the same TUNELAB_HOME.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]
HANDED_OVER = "handing the run to the server at"


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TUNELAB_TOKEN"}
    return {**env, "TUNELAB_HOME": str(home), "COLUMNS": "160"}


def run_cli(args: list[str], home: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(TUNELAB + args, env=cli_env(home), capture_output=True, text=True, timeout=timeout)


def write_config(path: Path, demo_assets, **overrides) -> Path:
    cfg = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
           "max_steps": 8, "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1,
           "learning_rate": 2e-3, **overrides}
    path.write_text(yaml.safe_dump(cfg))
    return path


def api(server) -> httpx.Client:
    """A client with the token the server created in its home (as the CLI reads it)."""
    token = (server.home / "token").read_text().strip()
    return server.client(token=token)


@pytest.mark.slow
def test_train_is_run_by_the_server_once(start_server, demo_assets, tmp_path):
    server = start_server(token=None, log_level="info", prewarm=True)  # as `tunelab serve` runs
    info = json.loads((server.home / "server.json").read_text())
    assert info["pid"] == server.pid and info["url"] == server.base_url + "/"
    config = write_config(tmp_path / "run.yaml", demo_assets, display_name="via server")

    result = run_cli(["train", str(config)], server.home)

    assert result.returncode == 0, result.stdout + result.stderr
    assert HANDED_OVER in result.stdout and "completed" in result.stdout
    with api(server) as client:
        runs = client.get("/api/runs").json()["runs"]
        status = client.get("/api/train/status").json()
    assert [(r["status"], r["final_step"], r["display_name"]) for r in runs] == [("completed", 8, "via server")]
    assert status["run_id"] == runs[0]["id"]
    # The server's own worker trained it (the CLI spawned none).
    worker_pid = status["worker_pid"]
    assert worker_pid and worker_pid != server.pid
    assert f"run {runs[0]['id']}: worker pid {worker_pid}" in (server.home / "logs" / "server.log").read_text()
    # The history the CLI reads itself holds that one run too.
    assert [r["id"] for r in json.loads(run_cli(["runs", "--json"], server.home).stdout)] == [runs[0]["id"]]

    server.stop()
    assert not (server.home / "server.json").exists()


# A signal to the CLI reaches the server as a stop-and-save request, whichever it is.
SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_to_the_cli_stops_the_submitted_run_with_a_checkpoint(start_server, demo_assets, tmp_path, sig):
    server = start_server(token=None)
    config = write_config(tmp_path / "run.yaml", demo_assets, max_steps=400, max_seq_length=128)
    proc = subprocess.Popen(TUNELAB + ["train", str(config)], env=cli_env(server.home), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    with api(server) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (client.get("/api/train/status").json().get("step") or 0) < 3:
            time.sleep(0.2)
        # To the CLI alone: the server and its worker hear of it only through the API.
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out
        runs = client.get("/api/runs").json()["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "stopped", runs
    stopped_at = runs[0]["final_step"]
    assert 3 <= stopped_at < 400 and runs[0]["can_resume"], runs[0]
    assert (Path(runs[0]["output_dir"]) / f"checkpoint-{stopped_at}").is_dir()
    assert "saving a checkpoint" in out


def test_a_path_outside_the_servers_folders_exits_2_with_the_local_hint(start_server, demo_assets, tmp_path):
    server = start_server(token=None)
    outside = tmp_path / "mine" / "rows.jsonl"
    outside.parent.mkdir()
    outside.write_text(Path(demo_assets.alpaca).read_text())
    config = write_config(tmp_path / "run.yaml", demo_assets, local_datasets=["mine/rows.jsonl"])

    result = run_cli(["train", str(config)], server.home)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "local_datasets" in result.stderr and "--local" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    with api(server) as client:
        assert client.get("/api/runs").json()["runs"] == []


@pytest.mark.slow
def test_local_flag_trains_in_this_process(start_server, demo_assets, tmp_path):
    server = start_server(token=None)
    config = write_config(tmp_path / "run.yaml", demo_assets)

    result = run_cli(["train", str(config), "--local"], server.home)

    assert result.returncode == 0, result.stdout + result.stderr
    assert HANDED_OVER not in result.stdout
    with api(server) as client:
        assert client.get("/api/train/status").json()["run_id"] is None  # the server never saw it
    assert [r["status"] for r in json.loads(run_cli(["runs", "--json"], server.home).stdout)] == ["completed"]


@pytest.mark.slow
def test_a_stale_server_file_falls_back_to_local(home, demo_assets, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (home / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9/", "host": "127.0.0.1", "port": 9,
                                                  "pid": gone.pid, "started_at": time.time()}))
    config = write_config(tmp_path / "run.yaml", demo_assets)

    result = run_cli(["train", str(config)], home)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"pid {gone.pid}, which is not running: training in this process" in result.stdout
    assert [r["status"] for r in json.loads(run_cli(["runs", "--json"], home).stdout)] == ["completed"]


@pytest.mark.slow
def test_server_dying_mid_run_is_reported_with_exit_1(start_server, demo_assets, tmp_path):
    server = start_server(token=None)
    config = write_config(tmp_path / "run.yaml", demo_assets, max_steps=400, max_seq_length=128)
    proc = subprocess.Popen(TUNELAB + ["train", str(config)], env=cli_env(server.home), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    with api(server) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (client.get("/api/train/status").json().get("step") or 0) < 2:
            time.sleep(0.2)
    server.process.kill()
    server.process.wait()

    out, _ = proc.communicate(timeout=60)

    assert proc.returncode == 1, out
    assert f"the server (pid {server.pid}) went away during run" in out.replace("\n", " ")


class CuttingProxy:
    """A loopback TCP proxy to the server that cuts the first progress stream once it has
    passed two progress events, as a flaky network would."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.progress_requests: list[str] = []
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        first = client.recv(65536)
        stream = re.match(rb"GET /api/runs/\d+/progress", first) is not None  # the CLI follows its run's own stream
        cut = stream and not self.progress_requests
        if stream:
            self.progress_requests.append(first.decode("latin-1"))
        threading.Thread(target=self._responses, args=(upstream, client, cut), daemon=True).start()
        data = first
        while data:
            try:
                upstream.sendall(data)
                data = client.recv(65536)
            except OSError:
                return

    def _responses(self, upstream: socket.socket, client: socket.socket, cut: bool) -> None:
        seen = 0
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
                seen += data.count(b"event: progress")
                if cut and seen >= 2:
                    self.cuts += 1
                    break
        except OSError:
            pass
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.slow
def test_a_dropped_stream_is_resumed_with_the_last_event_id(start_server, demo_assets, tmp_path):
    server = start_server(token=None)
    proxy = CuttingProxy(int(server.base_url.rsplit(":", 1)[1]))
    info = json.loads((server.home / "server.json").read_text())
    (server.home / "server.json").write_text(json.dumps({**info, "url": f"http://127.0.0.1:{proxy.port}/"}))
    config = write_config(tmp_path / "run.yaml", demo_assets, max_steps=20)
    try:
        result = run_cli(["train", str(config)], server.home)
    finally:
        proxy.close()

    assert result.returncode == 0, result.stdout + result.stderr
    assert proxy.cuts == 1 and len(proxy.progress_requests) >= 2, proxy.progress_requests
    resumed = re.search(r"(?im)^last-event-id: (\d+):(\d+)", proxy.progress_requests[1])
    assert resumed and int(resumed.group(2)) >= 2, proxy.progress_requests[1]
    with api(server) as client:
        runs = client.get("/api/runs").json()["runs"]
    assert [(r["id"], r["status"], r["final_step"]) for r in runs] == [(int(resumed.group(1)), "completed", 20)]
