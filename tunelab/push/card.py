"""The model card a push writes as the repo's README.md, and the loss plot it shows.

The card says what a reader of the repo needs to use and judge the model: the base
model, the data, the run's settings, its final metrics and the loss curve (the same PNG
as the page's plot, `tunelab.orchestrator.plots`), under YAML front matter the Hub reads
(`base_model`, `datasets`, `library_name`, `tags`; written by huggingface_hub's own
`ModelCardData`). Nothing of this machine travels: a local model or data file is named
by its file name only, never its path, and the stored config holds no secrets
(`RunConfig.public`); the token is never handed to this module at all.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from tunelab.events import finite_or_none
from tunelab.orchestrator.plots import loss_plot_png, plot_title
from tunelab.text import printable

PLOT_NAME = "training_loss.png"
# The settings a reader needs to reproduce or judge the run, in this order; others (paths,
# logging, devices, queueing) say something about this machine, not about the model.
SETTINGS = ("training_type", "objective", "beta", "num_generations", "max_seq_length", "load_in_4bit", "lora_r",
            "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "use_dora", "use_loftq", "num_epochs",
            "max_steps", "learning_rate", "batch_size", "gradient_accumulation_steps", "warmup_steps", "warmup_ratio",
            "weight_decay", "max_grad_norm", "lr_scheduler_type", "optim", "seed", "packing", "precision",
            "train_on_completions", "eval_steps", "format", "backend")
LIBRARIES = {"adapter": "peft", "merged": "transformers"}
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def hub_id(name: Any) -> str | None:
    """`name` if it reads as a Hub repo id and names no folder here, else None."""
    text = str(name or "")
    if not _HUB_ID.fullmatch(text) or os.path.exists(text) or ".." in text:
        return None
    return text


def loss_plot(run: Mapping[str, Any], metrics: list[dict[str, Any]]) -> bytes:
    """The run's loss curve as the page draws it (light theme)."""
    steps = [m["step"] for m in metrics]
    evals = [(m["step"], m["eval_loss"]) for m in metrics if finite_or_none(m.get("eval_loss")) is not None]
    return loss_plot_png(steps, [m.get("loss") for m in metrics], title=plot_title(run), theme="light",
                         eval_steps=[s for s, _ in evals], eval_losses=[v for _, v in evals])


def model_card(run: Mapping[str, Any], metrics: list[dict[str, Any]], extras: Mapping[str, Any], fmt: str,
               manifest: Mapping[str, Any], files: list[str]) -> str:
    """README.md for the repo: front matter, then the card's sections."""
    from huggingface_hub import ModelCardData

    config = run.get("config") or {}
    base = hub_id(config.get("model_name") or run.get("model_name"))
    dataset = hub_id(config.get("dataset"))
    tags = ["tunelab", str(config.get("training_type") or "lora"), str(config.get("objective") or "sft")]
    tags += {"adapter": ["peft", "lora"], "gguf": ["gguf"]}.get(fmt, [])
    data = ModelCardData(base_model=base, datasets=[dataset] if dataset else None, library_name=LIBRARIES.get(fmt),
                         tags=list(dict.fromkeys(tags)))
    title = run.get("display_name") or f"Run {run.get('id')}"
    sections = [f"# {_text(title)}",
                _intro(run, config, fmt, base, manifest),
                "## Data\n\n" + _data(config),
                "## Training settings\n\n" + _table(_settings(config)),
                "## Results\n\n" + _table(_results(run, metrics, extras)),
                f"![Training loss]({PLOT_NAME})",
                "## Files\n\n" + "\n".join(f"- `{_text(name)}`" for name in files),
                _usage(fmt, base, files)]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(s for s in sections if s) + "\n"


def _intro(run: Mapping[str, Any], config: Mapping[str, Any], fmt: str, base: str | None, manifest: Mapping[str, Any]) -> str:
    model = f"[{base}](https://huggingface.co/{base})" if base else f"a local model ({_local_name(config.get('model_name'))})"
    what = {"adapter": "A LoRA adapter for", "merged": "The weights of", "gguf": "A llama.cpp GGUF file of"}[fmt]
    tail = " with the adapter merged in" if fmt != "adapter" and config.get("training_type") in ("lora", "qlora") else ""
    kind = manifest.get("quant") or manifest.get("dtype")
    step = f" Exported from the checkpoint of step {manifest['step']} (the run was stopped)." if manifest.get("step") else ""
    return (f"{what} {model}{tail}, fine-tuned with tunelab "
            f"({_text(config.get('objective') or 'sft')}, {_text(config.get('training_type') or 'lora')})"
            f"{f'; weights in {_text(kind)}' if kind else ''}.{step}")


def _data(config: Mapping[str, Any]) -> str:
    lines = []
    if config.get("dataset"):
        name = _text(config["dataset"])
        link = f"[{name}](https://huggingface.co/datasets/{name})" if hub_id(config["dataset"]) else f"`{name}`"
        subset = f", subset `{_text(config['subset'])}`" if config.get("subset") else ""
        lines.append(f"- Hub dataset {link}{subset}, split `{_text(config.get('train_split') or 'train')}`")
    for path in config.get("local_datasets") or []:
        lines.append(f"- local file `{_local_name(path)}`")
    if config.get("s3"):
        lines.append("- files read from S3")
    if config.get("local_eval_datasets"):
        lines.append("- evaluated on " + ", ".join(f"`{_local_name(p)}`" for p in config["local_eval_datasets"]))
    return "\n".join(lines) or "Not recorded."


def _settings(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key in SETTINGS:
        value = config.get(key)
        if value is None or value == [] or (key == "beta" and config.get("objective") in (None, "sft")):
            continue
        rows.append((key, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return rows


def _results(run: Mapping[str, Any], metrics: list[dict[str, Any]], extras: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("status", str(run.get("status")))]
    if run.get("final_step") is not None:
        total = f" of {run['total_steps']}" if run.get("total_steps") else ""
        rows.append(("steps", f"{run['final_step']}{total}"))
    for label, value in (("final training loss", run.get("final_loss")),
                         ("final eval loss", _last(metrics, "eval_loss")), ("epochs", _last(metrics, "epoch")),
                         ("training time (s)", run.get("duration_seconds"))):
        if finite_or_none(value) is not None:
            rows.append((label, f"{value:.4g}" if isinstance(value, float) else str(value)))
    for name, series in extras.items():
        if series.get("values"):
            rows.append((name, f"{series['values'][-1]:.4g} (step {series['steps'][-1]})"))
    return rows


def _usage(fmt: str, base: str | None, files: list[str]) -> str:
    if fmt == "adapter":
        load = (f'base = AutoModelForCausalLM.from_pretrained("{base}")\n' if base
                else "base = AutoModelForCausalLM.from_pretrained(BASE_MODEL)  # the base model this adapter was trained on\n")
        return ("## Use\n\n```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n\n"
                f"{load}model = PeftModel.from_pretrained(base, REPO_ID)\n```")
    if fmt == "merged":
        return "## Use\n\n```python\nfrom transformers import AutoModelForCausalLM\n\nmodel = AutoModelForCausalLM.from_pretrained(REPO_ID)\n```"
    ggufs = [name for name in files if name.endswith(".gguf")]
    return f"## Use\n\n```sh\nllama-cli -m {ggufs[0] if ggufs else 'MODEL.gguf'} -p \"Hello\"\n```" + (
        "\n\nThe `Modelfile` runs it with Ollama: `ollama create NAME -f Modelfile`." if "Modelfile" in files else "")


def _last(metrics: list[dict[str, Any]], key: str) -> Any:
    values = [m[key] for m in metrics if finite_or_none(m.get(key)) is not None]
    return values[-1] if values else None


def _local_name(path: Any) -> str:
    return _text(Path(str(path or "")).name or "unnamed")


def _text(value: Any) -> str:
    """`value` safe inside a Markdown table cell or heading: one line, no pipes or backticks."""
    return printable(value, limit=200).replace("|", "\\|").replace("`", "'")


def _table(rows: list[tuple[str, str]]) -> str:
    if not rows:
        return "Not recorded."
    return "| | |\n|---|---|\n" + "\n".join(f"| {_text(k)} | {_text(v)} |" for k, v in rows)
