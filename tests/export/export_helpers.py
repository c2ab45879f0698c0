"""Helpers for the export tests: the `tunelab` CLI run as a subprocess against a temporary
home, short real training runs, reference logits of the demo model (with and without an
adapter) to compare exports against, and a real server on a free loopback port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]
# One fixed prompt whose logits are compared across the base model, the adapter and exports.
PROMPT = "Add the two numbers.\n3 and 4"
# A file of the user's in the folder the `full_run` fixture's `export_after` would write:
# the export is refused, and the run must complete all the same (test_export_after.py).
FOREIGN_FILE = "export-merged/notes.txt"


@dataclass(frozen=True)
class TrainedRun:
    home: Path
    run: dict[str, Any]
    output: str = ""  # what `tunelab train` printed

    @property
    def run_id(self) -> int:
        return self.run["id"]

    @property
    def output_dir(self) -> Path:
        return Path(self.run["output_dir"])

    @property
    def outputs_root(self) -> Path:
        return self.home / "outputs"


def run_cli(args: list[str], home: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(TUNELAB + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=timeout)


def train_run(home: Path, demo_assets, cli_args: tuple[str, ...] = (), **overrides: Any) -> TrainedRun:
    """A short real training run through the CLI (`cli_args` after `train CONFIG`); fails
    the test if it does not complete."""
    config = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
              "max_steps": 5, "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1,
              # A high rate, so five steps move the weights far enough to tell them from the base.
              "learning_rate": 1e-2, **overrides}
    home.mkdir(parents=True, exist_ok=True)
    config_file = home.parent / f"{home.name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    trained = run_cli(["train", config_file, *cli_args], home)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    runs = json.loads(run_cli(["runs", "--json"], home).stdout)
    assert runs and runs[0]["status"] == "completed", runs
    return TrainedRun(home, runs[0], trained.stdout)


def prompt_ids(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)(PROMPT, return_tensors="pt")["input_ids"]


def logits_of(model: Any, input_ids: Any) -> Any:
    import torch

    with torch.no_grad():
        return model.float().eval()(input_ids=input_ids).logits[0]


def base_model(demo_assets) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(demo_assets.model_dir, dtype=torch.float32)


def peft_logits(demo_assets, adapter_dir: Path, input_ids: Any) -> Any:
    """Logits of the demo base model with the adapter in `adapter_dir` applied by PEFT."""
    from peft import PeftModel

    return logits_of(PeftModel.from_pretrained(base_model(demo_assets), adapter_dir), input_ids)


@dataclass
class Server:
    process: subprocess.Popen
    base_url: str

    def client(self, token: str | None = None) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=120)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(home: Path, token: str) -> Server:
    """`python -m tunelab.server` on a free loopback port, answering /api/health."""
    import httpx

    # No prewarmed training worker (its torch import is seconds of CPU): this server only exports.
    env = {**os.environ, "TUNELAB_HOME": str(home), "TUNELAB_TOKEN": token, "PYTHONUNBUFFERED": "1",
           "TUNELAB_PREWARM": "0"}
    process = subprocess.Popen([sys.executable, "-m", "tunelab.server", "--host", "127.0.0.1", "--port", "0",
                                "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # The server prints its address once it is bound.
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stdout.readline())
    if not match:
        process.kill()
        raise RuntimeError("the server did not announce its address")
    server = Server(process, f"http://127.0.0.1:{match.group(1)}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.base_url + "/api/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("the server did not answer /api/health")
