"""The one job bench/whole_run.py gives every tool, and reading the timings back.

The job: a local HF model folder (copied, with a chat template written into its tokenizer
where it has none, so all three tools render the same text), a 10,000-row chat dataset
(JSONL, generated offline and deterministically), LoRA on every linear layer, N steps,
save, merge-export. This module writes each tool's description of that job — tunelab's
run config, the plain TRL script's settings, LLaMA-Factory's dataset_info.json and its
train and export YAML — and turns the time-stamped output lines of a run back into phases.
Torch-free: the unit tests in tests/test_bench_logic.py import it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

# tunelab's fallback chat template less its BOS: LLaMA-Factory parses a template from the
# tokenizer by rendering one turn, and a BOS inside the template would be repeated before
# every user turn there. Plain text markers only: no tool has to add tokens to the vocabulary.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
DATASET_NAME = "bench_chat"
ROWS = 10_000
# Word counts per turn (about one token a word with the bench tokenizer): lognormal like
# real instruction data, capped so that a whole conversation fits max_length and no tool's
# truncation rule (they differ) comes into play.
PROMPT_MEDIAN, REPLY_MEDIAN, SIGMA = 24, 90, 0.8
PROMPT_MAX, REPLY_MAX = 120, 300
MULTI_TURN_SHARE = 0.2


@dataclass(frozen=True)
class Job:
    model: str  # a local HF model folder
    data: str  # chat JSONL ({"messages": [...]})
    steps: int
    batch_size: int = 4
    learning_rate: float = 2e-4
    lora_r: int = 16
    lora_alpha: int = 16
    max_length: int = 512
    seed: int = 3407
    bf16: bool = False  # the precision every arm trains in (bf16 autocast, else fp32)
    # Processes each peer tokenizes with (TRL's dataset_num_proc, LLaMA-Factory's
    # preprocessing_num_workers): the machine's cores, as their users set them.
    workers: int = 1


def _lognormal(rng: random.Random, median: int, cap: int) -> int:
    return max(2, min(cap, round(rng.lognormvariate(0, SIGMA) * median)))


def chat_rows(count: int, words: Any, seed: int = 5) -> list[dict[str, Any]]:
    """`count` conversations; `words(n)` gives a text of n words. One in five has two
    exchanges, the rest one."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        exchanges = 2 if rng.random() < MULTI_TURN_SHARE else 1
        messages = []
        for _ in range(exchanges):
            # Halved for two exchanges so a conversation stays within the same cap.
            messages.append({"role": "user", "content": words(_lognormal(rng, PROMPT_MEDIAN, PROMPT_MAX // exchanges))})
            messages.append({"role": "assistant", "content": words(_lognormal(rng, REPLY_MEDIAN, REPLY_MAX // exchanges))})
        rows.append({"messages": messages})
    return rows


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def tunelab_config(job: Job, output_dir: str | None = None) -> dict[str, Any]:
    """tunelab's run config: loss on every token (like the others), no packing, one
    optimizer step per batch; the precision is tunelab's own choice (`auto`)."""
    return {
        "model_name": job.model, "local_datasets": [job.data], "training_type": "lora",
        "max_steps": job.steps, "batch_size": job.batch_size, "gradient_accumulation_steps": 1,
        "learning_rate": job.learning_rate, "lora_r": job.lora_r, "lora_alpha": job.lora_alpha, "lora_dropout": 0.0,
        "max_seq_length": job.max_length, "seed": job.seed, "warmup_steps": 0, "lr_scheduler_type": "linear",
        "train_on_completions": False, "packing": False, "logging_steps": 1, "save_steps": 0,
        "display_name": "whole-run bench", **({"output_dir": output_dir} if output_dir else {}),
    }


def trl_settings(job: Job, output_dir: str, merged_dir: str) -> dict[str, Any]:
    """bench/plain_trl.py's settings for the same job, saving the adapter and a merged copy,
    at TRL's best for it: padding-free batches (every row fits max_length, so nothing needs
    the truncation padding-free batches cannot do) and tokenizing in `job.workers` processes."""
    return {
        "padding_free": True, "dataset_num_proc": job.workers,
        "model": job.model, "data": job.data, "output_dir": output_dir, "max_steps": job.steps,
        "batch_size": job.batch_size, "learning_rate": job.learning_rate, "lora_r": job.lora_r,
        "lora_alpha": job.lora_alpha, "max_length": job.max_length, "seed": job.seed, "bf16": job.bf16,
        "save_adapter": True, "merged_dir": merged_dir, "merged_dtype": "bfloat16" if job.bf16 else "float16",
    }


def lf_dataset_info(data_file: str) -> dict[str, Any]:
    """LLaMA-Factory's dataset_info.json naming the local chat file (sharegpt layout with
    OpenAI-style role/content messages)."""
    return {DATASET_NAME: {
        "file_name": data_file, "formatting": "sharegpt", "columns": {"messages": "messages"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
                 "system_tag": "system"},
    }}


def lf_train_config(job: Job, dataset_dir: str, output_dir: str) -> dict[str, Any]:
    """`llamafactory-cli train` settings. No `template`: LLaMA-Factory parses the one in the
    model's tokenizer (the model's own template). train_on_prompt: the loss on every token,
    as in the other two arms. `preprocessing_num_workers`: its tokenizing in `job.workers`
    processes, as its users set it. No packing: on a CPU it makes steps longer without making
    a token cheaper (bench/packing.py), and tunelab's arm does not pack either."""
    return {
        "model_name_or_path": job.model, "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "lora_rank": job.lora_r, "lora_alpha": job.lora_alpha, "lora_dropout": 0.0, "lora_target": "all",
        "dataset": DATASET_NAME, "dataset_dir": dataset_dir, "cutoff_len": job.max_length, "train_on_prompt": True,
        "overwrite_cache": True, "output_dir": output_dir, "overwrite_output_dir": True,
        "per_device_train_batch_size": job.batch_size, "gradient_accumulation_steps": 1,
        "learning_rate": job.learning_rate, "max_steps": job.steps, "lr_scheduler_type": "linear", "warmup_steps": 0,
        "weight_decay": 0.001, "seed": job.seed, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
        "plot_loss": False, "bf16": job.bf16, "fp16": False, "use_cpu": True, "disable_tqdm": True,
        "dataloader_num_workers": 0, "preprocessing_num_workers": job.workers,
    }


def lf_export_config(job: Job, adapter_dir: str, export_dir: str) -> dict[str, Any]:
    """`llamafactory-cli export`: merge the adapter into the base and save it, on the CPU."""
    return {
        "model_name_or_path": job.model, "adapter_name_or_path": adapter_dir, "finetuning_type": "lora",
        "export_dir": export_dir, "export_device": "cpu", "export_legacy_format": False,
        "infer_dtype": "bfloat16" if job.bf16 else "float16",
    }


def to_yaml(settings: dict[str, Any]) -> str:
    """Flat settings as YAML (JSON scalars are valid YAML), so no YAML library is needed."""
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())


# --- reading runs back ---------------------------------------------------------------

Stamped = Sequence[tuple[float, str]]  # (time.time() the line arrived, the line)


def first_match(lines: Stamped, pattern: str, after: float = float("-inf")) -> float | None:
    """The arrival time of the first line matching `pattern` (a regular expression) at or after `after`."""
    compiled = re.compile(pattern)
    return next((ts for ts, line in lines if ts >= after and compiled.search(line)), None)


def last_match(lines: Stamped, pattern: str) -> float | None:
    compiled = re.compile(pattern)
    return next((ts for ts, line in reversed(lines) if compiled.search(line)), None)


def phases(start: float, end: float, marks: Sequence[tuple[str, float | None]]) -> dict[str, float]:
    """Seconds per phase: `marks` are (name of the phase that ENDS at this time, time), in
    order; the last phase runs to `end`, named "rest". A mark that was not seen (None) or
    that goes back in time is skipped and its phase merges into the next."""
    out: dict[str, float] = {}
    previous = start
    pending = ""
    for name, ts in marks:
        if ts is None or ts < previous:
            pending = f"{pending}+{name}" if pending else name
            continue
        label = f"{pending}+{name}" if pending else name
        out[label] = ts - previous
        previous, pending = ts, ""
    out[f"{pending}+rest" if pending else "rest"] = end - previous
    return out


LOSS_JSON = re.compile(r"['\"]loss['\"]:\s*['\"]?([0-9.eE+-]+|nan)")


def losses_in(lines: Stamped) -> list[float]:
    """The per-step losses a Trainer log line prints ({'loss': 2.1, ...}), in order."""
    found = []
    for _, line in lines:
        match = LOSS_JSON.search(line)
        if match and "train_loss" not in line:
            found.append(float(match.group(1)))
    return found
