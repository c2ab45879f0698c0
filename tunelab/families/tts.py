"""The Orpheus-style text-to-speech family: told from the model's own files, never its name.

A causal LM over SNAC codec tokens is text-to-speech when its config.json carries the
`tunelab_tts` marker (what tunelab writes: `{"codec": "snac", "codebook_size": K}`), or its
tokenizer.json holds Orpheus's whole audio range (`<custom_token_10>` through
`<custom_token_28681>`: 7 places of a frame times 4096 codes, after 10 control tokens). The
layout itself (frames, control tokens, ids) is `worker/families/tts/layout.py`'s; the names
here are the ones detection needs. Such a model loads as a causal LM, speaks instead of
chatting, and converts to a GGUF like any Llama. Other text-to-speech families (their specs'
modality `tts`) have tests of their own, asked first where a model could pass both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from tunelab.families.spec import FamilySpec, ModelFiles

MARKER = "tunelab_tts"
ORPHEUS_CODEBOOK_SIZE = 4096
FRAME = 7  # tokens per frame: 1 coarse + 2 mid + 4 fine
AUDIO_BASE = 10  # <custom_token_10> is the first audio token
# The model types whose tokenizer is worth reading for Orpheus's range: only causal LMs carry it.
CAUSAL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")
MLX_REFUSAL = ("is a text-to-speech model (text to audio-codec tokens), and the mlx backend trains text models only "
               "(no maintained MLX package trains it here); use backend=torch")


def token_name(n: int) -> str:
    return f"<custom_token_{n}>"


def tokens_have_orpheus_range(tokens: set[str]) -> bool:
    return token_name(AUDIO_BASE) in tokens and token_name(AUDIO_BASE + FRAME * ORPHEUS_CODEBOOK_SIZE - 1) in tokens


def added_tokens(tokenizer_json: str | Path | None) -> set[str]:
    """The added tokens a tokenizer.json names (empty when it is missing or unreadable)."""
    try:
        data = json.loads(Path(tokenizer_json).read_text()) if tokenizer_json else {}
    except (OSError, ValueError):
        return set()
    return {entry.get("content") for entry in data.get("added_tokens") or [] if isinstance(entry, dict)}


def config_dict_is_tts(config: Mapping[str, Any], tokenizer_json: str | Path | None = None) -> bool:
    """The test on a raw config.json and (when given) the tokenizer.json beside it: Orpheus's layout."""
    if isinstance(config.get(MARKER), dict):
        return True
    return tokenizer_json is not None and tokens_have_orpheus_range(added_tokens(tokenizer_json))


def _matches(files: ModelFiles) -> bool:
    # The raw config.json in parent and child alike: the marker is no transformers field.
    if config_dict_is_tts(files.config):
        return True  # the marker: no tokenizer to read
    tokenizer = files.tokenizer_json()
    return tokenizer is not None and tokens_have_orpheus_range(added_tokens(tokenizer))


SPEAK_REFUSAL = ("run {run_id} trained a text-to-speech model, which answers with audio, not text; speak with it: "
                 "`tunelab speak {run_id} \"some text\"` or POST /api/runs/{run_id}/speak")

SPEC = FamilySpec(name="tts", modality="tts", words="a text-to-speech model", matches=_matches,
                  auto_class="AutoModelForCausalLM", backends=("torch",), refusal=MLX_REFUSAL, serves="speak",
                  chat_refusal=SPEAK_REFUSAL, evaluates=False, demo="orpheus", demo_builder="tunelab.demos.tts",
                  demo_words="a tiny Orpheus-style Llama with a SNAC codec",
                  settings=("tts_codec", "tts_sample_text"))
