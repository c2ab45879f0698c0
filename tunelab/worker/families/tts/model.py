"""Telling an Orpheus-style text-to-speech model from the others, and the ids of its layout.

Detection reads the model's own files (`tts_layout.config_dict_is_tts`: the `tunelab_tts`
marker in config.json, or Orpheus's audio range among the tokenizer's added tokens),
never its name. Such a model is a causal LM: it loads as the text family's does, with
its tokenizer; `Layout` holds the ids the rows and the sample synthesis need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker.families.tts import layout as tts_layout
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def _hub_file(config: WorkerConfig, name: str) -> str | None:
    from transformers.utils import cached_file

    try:
        return cached_file(config.model_name, name, token=config.hf_token or None,
                           _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):
        return None  # the model load reports the real problem, in its own words


def model_config_dict(config: WorkerConfig) -> dict[str, Any]:
    """The model's config.json as it is on disk (the marker is not a transformers field)."""
    found = _hub_file(config, "config.json")
    try:
        loaded = json.loads(Path(found).read_text()) if found else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def is_csm_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is a Sesame CSM model (its config's model_type)."""
    return tts_layout.config_dict_is_csm(model_config_dict(config))


def is_tts_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is a text-to-speech model: Orpheus-style (its config,
    then its tokenizer) or Sesame CSM (its config)."""
    model_config = model_config_dict(config)
    if not model_config:
        return False
    if tts_layout.config_dict_is_tts(model_config):
        return True
    if model_config.get("model_type") not in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3"):
        return False  # only causal LMs carry the layout; other configs need no tokenizer read
    return tts_layout.config_dict_is_tts(model_config, _hub_file(config, "tokenizer.json"))


@dataclass(frozen=True)
class Layout:
    codebook_size: int
    audio_start: int  # id of <custom_token_10>: code c at place p is audio_start + p * K + c
    control: dict[str, int]  # tts_layout.CONTROL names -> ids
    bos: int | None
    end_of_text: int  # closes the human's text, before <end_of_human> (tts_layout.END_OF_TEXT)

    def audio_ids(self, offsets: list[int]) -> list[int]:
        return [self.audio_start + offset for offset in offsets]

    def offsets(self, ids: list[int]) -> list[int]:
        return [i - self.audio_start for i in ids if self.audio_start <= i < self.audio_start + tts_layout.FRAME * self.codebook_size]


def layout_of(tokenizer: Any, model_config: dict[str, Any]) -> Layout:
    """The ids of the layout's tokens; a tokenizer lacking some is refused, naming them."""
    size = tts_layout.codebook_size_of(model_config)
    wanted = tts_layout.layout_tokens(size)
    ids = tokenizer.convert_tokens_to_ids(wanted)
    unk = tokenizer.unk_token_id
    missing = [name for name, i in zip(wanted, ids) if i is None or (unk is not None and i == unk)]
    if missing:
        raise RunSettingError("model_name", f"the model's tokenizer lacks {len(missing)} of the Orpheus layout's tokens (e.g. {missing[0]}); "
                                            f"a TTS model's tokenizer needs <custom_token_0> to <custom_token_{len(wanted) - 1}>")
    start = ids[tts_layout.AUDIO_BASE]
    if ids[tts_layout.AUDIO_BASE:] != list(range(start, start + tts_layout.FRAME * size)):
        raise RunSettingError("model_name", "the model's audio tokens do not have consecutive ids; the Orpheus layout needs them in order")
    return Layout(size, start, {name: ids[n] for name, n in tts_layout.CONTROL.items()}, tokenizer.bos_token_id,
                  _end_of_text(tokenizer))


def _end_of_text(tokenizer: Any) -> int:
    """Orpheus's end of the human's text: <|eot_id|> where the vocabulary has it, else the EOS."""
    found = tokenizer.convert_tokens_to_ids(tts_layout.END_OF_TEXT)
    if found is not None and found != tokenizer.unk_token_id:
        return int(found)
    if tokenizer.eos_token_id is None:
        raise RunSettingError("model_name", f"the model's tokenizer has neither {tts_layout.END_OF_TEXT} nor an EOS token; the Orpheus "
                                            "layout ends the prompt's text with one (set eos_token in its tokenizer_config.json)")
    return int(tokenizer.eos_token_id)


def check_codec_matches(layout: Layout, codec: Any) -> None:
    if codec.codebook_size != layout.codebook_size:
        raise RunSettingError("tts_codec", f"the codec has {codec.codebook_size} codes per codebook and the model's vocabulary "
                                           f"{layout.codebook_size}; use the codec the model was trained with")
