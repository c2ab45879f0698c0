"""What a worker records beside a run's weights about how it trained, for later readers.

The stored config says what was asked (`precision: auto`); only the worker knows what it
became on that machine (bf16 on an Ampere GPU, fp16 on a T4, fp32 on a CPU). The worker
writes `tunelab-run.json` into the run folder; export reads it to merge in the precision
the run trained in. A LoftQ run also leaves `loftq-base.safetensors`: the weights of the
adapted layers as the adapter was trained against them (LoftQ replaces them with their
quantised form, or trains on a 4-bit base), which export merges into instead of the
original ones. A text-to-speech run keeps the SNAC codec that turns its tokens into sound
as `codec/` beside its weights (written by `worker/families/tts/codec.py`, carried into its
export by `export/codec.py`). Torch-free; a missing or unreadable file reads as no facts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUN_FACTS = "tunelab-run.json"
LOFTQ_BASE = "loftq-base.safetensors"
CODEC_SUBFOLDER = "codec"
CODEC_FILES = ("config.json", "pytorch_model.bin")  # what the `snac` package saves and loads


def write_run_facts(output_dir: str | Path, **facts: Any) -> None:
    (Path(output_dir) / RUN_FACTS).write_text(json.dumps(facts, indent=1))


def read_run_facts(output_dir: str | Path | None) -> dict[str, Any]:
    if not output_dir:
        return {}
    try:
        facts = json.loads((Path(output_dir) / RUN_FACTS).read_text())
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}
