"""The Sesame CSM family: transformers' `CsmForConditionalGeneration`, its Mimi codec inside it.

Told by its config.json's model_type `csm` (`config_dict_is_csm`), never its name: a
text-to-speech model (its runs speak, modality tts, refused by mlx in the same words as an
Orpheus-style one) that loads through its own class, carries its codec (so no `tts_codec`
applies), and that llama.cpp's converter does not take (a backbone, a depth decoder and a codec).
"""

from __future__ import annotations

from typing import Any, Mapping

from tunelab.families.spec import FamilySpec, ModelFiles
from tunelab.families.tts import MLX_REFUSAL, SPEAK_REFUSAL

CSM_MODEL_TYPE = "csm"  # transformers' Sesame CSM


def config_dict_is_csm(config: Mapping[str, Any]) -> bool:
    return config.get("model_type") == CSM_MODEL_TYPE


# Its export's README line: the Mimi codec is inside the weights, so no codec/ travels with it.
EXPORT_NOTE = ("Text-to-speech model (Sesame CSM, exported by tunelab). Its Mimi codec is inside the weights: "
               "`processor = AutoProcessor.from_pretrained(path)`, `model = CsmForConditionalGeneration.from_pretrained(path)`, "
               "`audio = model.generate(**processor('[0]Hello.', add_special_tokens=True), output_audio=True)` "
               "(\"[N]\" is the speaker id), then `processor.save_audio(audio, 'out.wav')`.\n")


def _matches(files: ModelFiles) -> bool:
    return config_dict_is_csm(files.config)


SPEC = FamilySpec(name="csm", modality="tts", words="a Sesame CSM text-to-speech model", matches=_matches,
                  auto_class="CsmForConditionalGeneration", backends=("torch",), refusal=MLX_REFUSAL, gguf=False,
                  serves="speak", chat_refusal=SPEAK_REFUSAL, evaluates=False, demo="csm", demo_builder="tunelab.demos.csm",
                  demo_words="a tiny Sesame CSM with its Mimi codec inside",
                  speaker="tunelab.worker.families.csm.speak", export_note=EXPORT_NOTE, settings=("tts_sample_text",))
