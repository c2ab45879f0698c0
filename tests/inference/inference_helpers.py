"""Helpers for the inference tests: one short real LoRA run (trained through the CLI into
its own home), the `tunelab` CLI as a subprocess, and reference answers computed here,
in the test process, with transformers and PEFT directly — what the inference child
must reproduce token for token under greedy decoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]


@dataclass(frozen=True)
class TrainedRun:
    home: Path
    run: dict[str, Any]
    base_model: Path

    @property
    def run_id(self) -> int:
        return self.run["id"]

    @property
    def output_dir(self) -> Path:
        return Path(self.run["output_dir"])


def run_cli(args: list[Any], home: Path, *, stdin: str | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200", **(env or {})}
    return subprocess.run(TUNELAB + [str(a) for a in args], env=full_env, input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def train_lora_run(home: Path, demo_assets) -> TrainedRun:
    """Four LoRA steps at a high rate (so the adapter visibly changes greedy answers), with
    checkpoints at steps 2 and 4, and an eval split (5% held out, measured at step 4) for
    `tunelab eval` to measure on."""
    config = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
              "max_steps": 4, "save_steps": 2, "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1,
              "learning_rate": 1e-2, "lora_r": 8, "lora_alpha": 16, "eval_steps": 4, "eval_holdout": 0.05}
    home.mkdir(parents=True, exist_ok=True)
    config_file = home.parent / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    trained = run_cli(["train", config_file], home)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    runs = json.loads(run_cli(["runs", "--json"], home).stdout)
    assert runs and runs[0]["status"] == "completed", runs
    return TrainedRun(home, runs[0], demo_assets.model_dir)


class Reference:
    """The run's model loaded here, for greedy answers to compare the child's against."""

    def __init__(self, trained: TrainedRun, weights: Path | None = None):
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        weights = weights or trained.output_dir
        base = AutoModelForCausalLM.from_pretrained(trained.base_model, dtype=torch.float32)
        self.model = PeftModel.from_pretrained(base, weights).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(weights)

    def _greedy(self, input_ids: Any, max_new_tokens: int, adapter: bool) -> tuple[str, int]:
        import contextlib

        import torch

        context = contextlib.nullcontext() if adapter else self.model.disable_adapter()
        with context, torch.inference_mode():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                      max_new_tokens=max_new_tokens, pad_token_id=self.tokenizer.pad_token_id)
        new = out[0][input_ids.shape[1]:]
        return self.tokenizer.decode(new, skip_special_tokens=True), int(input_ids.shape[1])

    def chat(self, messages: list[dict[str, str]], max_new_tokens: int, adapter: bool = True) -> str:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        return self._greedy(ids, max_new_tokens, adapter)[0]

    def chat_prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def complete(self, prompt: str, max_new_tokens: int, adapter: bool = True) -> str:
        ids = self.tokenizer(prompt, add_special_tokens=True, return_tensors="pt")["input_ids"]
        return self._greedy(ids, max_new_tokens, adapter)[0]


@dataclass
class Server:
    process: subprocess.Popen
    base_url: str
    token: str

    def client(self, token: str | None = "") -> Any:
        import httpx

        token = self.token if token == "" else token
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=300)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(home: Path, token: str, env: dict[str, str] | None = None) -> Server:
    """`python -m tunelab.server` on a free loopback port, once it answers /api/health."""
    import re
    import time

    import httpx

    # No prewarmed training worker (its torch import is seconds of CPU): these servers only serve models.
    full_env = {**os.environ, "TUNELAB_HOME": str(home), "TUNELAB_TOKEN": token, "PYTHONUNBUFFERED": "1",
                "TUNELAB_PREWARM": "0", **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "tunelab.server", "--host", "127.0.0.1", "--port", "0",
                                "--log-level", "warning"], env=full_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stdout.readline())
    if not match:
        process.kill()
        raise RuntimeError("the server did not announce its address")
    server = Server(process, f"http://127.0.0.1:{match.group(1)}", token)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.base_url + "/api/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("the server did not answer /api/health")
