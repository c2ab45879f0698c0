"""Telling an Orpheus-style text-to-speech model from the others, and the ids of its layout.

Detection reads the model's own files (the family spec `tunelab/families/tts.py`: the
`tunelab_tts` marker in config.json, or Orpheus's audio range among the tokenizer's added
tokens; every other family of modality tts by its own test), never its name. Such a model is a causal LM:
it loads as the text family's does, with its tokenizer; `Layout` holds the ids the rows
and the sample synthesis need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunelab import families
from tunelab.families import tts
from tunelab.worker.families.model_files import model_config_dict, model_files  # noqa: F401 - model_config_dict: read here by tts callers
from tunelab.worker.families.tts import layout as tts_layout
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

def is_tts_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is a text-to-speech model: one that a family of modality
    tts claims (Orpheus-style: its config, then its tokenizer; the others by their own tests)."""
    files = model_files(config, transformers=False)
    return any(spec.matches(files) for spec in families.all() if spec.modality == tts.SPEC.modality)


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
