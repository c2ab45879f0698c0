"""The Sesame CSM family: transformers' `CsmForConditionalGeneration`, its Mimi codec inside it.

Told by its config.json's model_type `csm` (`tts.config_dict_is_csm`), never its name: a
text-to-speech model (its runs speak, modality tts, refused by mlx in the same words as an
Orpheus-style one) that loads through its own class, carries its codec (so no `tts_codec`
applies), and that llama.cpp's converter does not take (a backbone, a depth decoder and a codec).
"""

from __future__ import annotations

from tunelab.families.spec import FamilySpec, ModelFiles
from tunelab.families.tts import MLX_REFUSAL, SPEAK_REFUSAL, config_dict_is_csm


def _matches(files: ModelFiles) -> bool:
    return config_dict_is_csm(files.config)


SPEC = FamilySpec(name="csm", modality="tts", words="a Sesame CSM text-to-speech model", matches=_matches,
                  auto_class="CsmForConditionalGeneration", backends=("torch",), refusal=MLX_REFUSAL, gguf=False,
                  serves="speak", chat_refusal=SPEAK_REFUSAL, evaluates=False, demo="csm", settings=("tts_sample_text",))
