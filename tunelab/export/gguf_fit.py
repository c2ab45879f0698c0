"""Which trained models a GGUF export cannot take, told when the export is planned.

llama.cpp's converter writes language models; a Sesame CSM text-to-speech model (a backbone,
a depth decoder and a Mimi codec), a speech-to-text model (Whisper's encoder-decoder) and an
audio chat model (Qwen2-Audio's audio tower beside its language model) are not models it
converts into a GGUF that llama.cpp runs, so such a run's GGUF export is refused before any
child starts, naming the format and what works instead. An Orpheus-style text-to-speech
model is a Llama and converts like one. The model is told from its config.json (the exported
folder's own, else the base model's), as the worker tells it: by the family specs
(`tunelab/families`), whose `gguf` says which families the converter takes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tunelab import families

GGUF_FORMATS = ("gguf", "gguf-adapter")


def _read(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _model_config(source: Path, config: dict[str, Any]) -> dict[str, Any]:
    # A full run's folder has its config.json; an adapter's base model (a folder here, or the hub's cache) says.
    name = str(config.get("model_name") or "")
    for folder in [Path(source)] + ([Path(name).expanduser()] if name else []):
        if (folder / "config.json").is_file():
            return _read(folder / "config.json")
    if not name:
        return {}
    from huggingface_hub import hf_hub_download

    try:
        return _read(Path(hf_hub_download(name, "config.json", token=config.get("hf_token") or None)))
    except Exception:  # not on the hub, or the hub unreachable: nothing to tell the model by
        return {}


def _kind_of_model(model_config: dict[str, Any]) -> str | None:
    """What the model is, when its family is one llama.cpp's converter cannot take; None otherwise."""
    spec = families.detect(families.ModelFiles(config=model_config))
    if spec.gguf:
        return None
    return f"{spec.words} ({model_config.get('model_type') or spec.build})" if spec.build else spec.words


def gguf_refusal(run_id: int, fmt: str, kind: str, source: Path, config: dict[str, Any]) -> str | None:
    """Why `fmt` cannot export this run's model, with what can; None when it can (or `fmt` is not GGUF)."""
    if fmt not in GGUF_FORMATS:
        return None
    what = _kind_of_model(_model_config(source, config))
    if what is None:
        return None
    instead = "format merged (the full model as safetensors)" + (", or adapter (the LoRA adapter as safetensors)" if kind == "adapter" else "")
    return (f"run {run_id} trained {what}, which llama.cpp's GGUF converter cannot turn into a GGUF llama.cpp runs, so format "
            f"{fmt} does not apply to it; export {instead}, which transformers loads")
