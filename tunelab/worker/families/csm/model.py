"""Sesame CSM's pieces: its processor, the Mimi codec inside the model, and its "[speaker]text" prompt.

A CSM model (transformers' `CsmForConditionalGeneration`, config model_type `csm`) carries
its codec as `model.codec_model` (Mimi) and saves it with its weights, so the codec a run
encodes with, samples with and exports is always the model's own: no `tts_codec` applies.
`MimiCodec` gives the codec cache (`tts_cache`) what it keys on — the codec's rate and a
`fingerprint` over its config, dtype and weights — and turns a clip into frames (one list
of `num_codebooks` codes per frame, as CSM's backbone and depth decoder read them).
Its text follows CSM's convention (transformers' CSM docs and chat template): the speaker's
id in brackets before the words, "[0]Hello there.", tokenized with the tokenizer's special
tokens (as the processor is called to generate).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

DEFAULT_SPEAKER = 0


def load_processor(config: WorkerConfig) -> Any:
    from transformers import AutoProcessor

    name = config.model_name
    try:
        processor = AutoProcessor.from_pretrained(name, token=config.hf_token or None,
                                                  trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise RunSettingError("model_name", f"{name} is a Sesame CSM model but its processor does not load ({exc}); the model "
                                            "folder needs CSM's processor files (processor_config.json and the tokenizer)") from exc
    for part in ("tokenizer", "feature_extractor"):
        if getattr(processor, part, None) is None:
            raise RunSettingError("model_name", f"{name} is a Sesame CSM model but its processor has no {part}; "
                                                "save the model with its CsmProcessor")
    return processor


def speaker_prompt(text: str, speaker: Any = None) -> str:
    """CSM's prompt for `text` said by `speaker` (an integer id; none: speaker 0)."""
    return f"[{DEFAULT_SPEAKER if speaker is None else speaker}]{text}"


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    return list(tokenizer(prompt, add_special_tokens=True).input_ids)


@dataclass
class MimiCodec:
    model: Any  # the CSM model's codec_model, in eval mode
    num_codebooks: int
    fingerprint: str

    @property
    def rate(self) -> int:
        return int(self.model.config.sampling_rate)

    def encode(self, samples: np.ndarray) -> list[list[int]]:
        """Mono float32 samples at `rate` Hz -> frames of `num_codebooks` codes."""
        import torch

        parameter = next(self.model.parameters())
        audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).view(1, 1, -1).to(parameter.device, parameter.dtype)
        with torch.inference_mode():
            codes = self.model.encode(audio, num_quantizers=self.num_codebooks).audio_codes  # (1, codebooks, frames)
        return codes[0].transpose(0, 1).tolist()


def codec_of(model: Any) -> MimiCodec:
    """The model's own codec; one whose codebooks are fewer than the model reads is refused."""
    codec = model.codec_model.eval()
    wanted = int(model.config.num_codebooks)
    if int(codec.config.num_quantizers) < wanted:
        raise RunSettingError("model_name", f"the model reads {wanted} codebooks per frame and its Mimi codec makes "
                                            f"{codec.config.num_quantizers}; use a CSM checkpoint whose codec_config matches")
    digest = hashlib.sha256(json.dumps(codec.config.to_dict(), sort_keys=True, default=str).encode())
    for name, tensor in sorted(codec.state_dict().items()):
        digest.update(name.encode() + str(tensor.dtype).encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return MimiCodec(codec, wanted, digest.hexdigest())
