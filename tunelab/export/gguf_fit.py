"""Which trained models a GGUF export cannot take, told when the export is planned.

llama.cpp's converter writes language models; a Sesame CSM text-to-speech model (a backbone,
a depth decoder and a Mimi codec), a speech-to-text model (Whisper's encoder-decoder) and an
audio chat model (Qwen2-Audio's audio tower beside its language model) are not models it
converts into a GGUF that llama.cpp runs, so such a run's GGUF export is refused before any
child starts, naming the format and what works instead. An Orpheus-style text-to-speech
model is a Llama and converts like one. The model is told from its config.json (the exported
folder's own, else the base model's), as the worker tells it: by the same torch-free tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    from tunelab.worker.families.tts.model import model_config_dict
    from tunelab.worker.run_config import model_reference

    return model_config_dict(model_reference(name, trust_remote_code=bool(config.get("trust_remote_code"))))


def _kind_of_model(model_config: dict[str, Any]) -> str | None:
    """What the model is, when it is one llama.cpp's converter cannot take; None otherwise."""
    from tunelab.worker.families.audio_chat.model import config_dict_is_audio_chat
    from tunelab.worker.families.speech.model import config_dict_is_speech
    from tunelab.worker.families.tts.layout import config_dict_is_csm

    if config_dict_is_csm(model_config):
        return "a Sesame CSM text-to-speech model"
    if config_dict_is_speech(model_config):
        return f"a speech-to-text model ({model_config.get('model_type') or 'encoder-decoder'})"
    if config_dict_is_audio_chat(model_config):
        return f"an audio chat model ({model_config.get('model_type') or 'audio tower and language model'})"
    return None


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
