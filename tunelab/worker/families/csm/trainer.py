"""Sesame CSM's Trainer and spoken sample: CSM's own loss over cached codes, its own generation and codec.

CSM's forward, given text ids and raw audio, runs the codec on every clip of every batch
to find the codes it embeds and predicts. Here the codes come from the run's codec cache
(`csm_data`), so `CsmTrainer.compute_loss` does that merge itself — text embeddings where
the text is, the backbone's summed codebook embeddings where the frames are — and hands
the model `inputs_embeds` with the (batch, length, codebooks) labels: the loss is the one
transformers' CSM computes from them (the backbone on the first codebook, the depth
decoder on the others), nothing of tunelab's own.
`speak` is the sample at each eval: `model.generate(..., output_audio=True)` — CSM's
generation, its frames decoded by its own codec — into `samples/step-<N>.wav`. The first
frame may not be the end of audio (`NotEndFirst`), so even an untrained model says something.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import LogitsProcessor, Trainer

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class CsmTrainer(Trainer):
    # compute_loss returns each batch's mean: the Trainer divides it for gradient accumulation.
    loss_is_scaled_for_ga = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs = False  # CSM's two losses are not one token count's mean

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        import torch

        base = self.accelerator.unwrap_model(model)
        base = base.get_base_model() if hasattr(base, "get_base_model") else base
        text = base.embed_text_tokens(inputs["input_ids"])
        frames = base.backbone_model.embed_tokens(inputs["codes"])
        embeds = torch.where(inputs["audio"].unsqueeze(-1), frames.to(text.dtype), text)
        outputs = model(inputs_embeds=embeds, attention_mask=inputs["attention_mask"], labels=inputs["labels"])
        return (outputs.loss, {"logits": outputs.logits}) if return_outputs else outputs.loss


class NotEndFirst(LogitsProcessor):
    """At the first generated frame, the backbone may not pick the end-of-audio code."""

    def __init__(self, codebook_eos: int):
        self.codebook_eos = codebook_eos

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.ndim == 2:  # still the text prompt: no frame made yet
            scores[:, self.codebook_eos] = float("-inf")
        return scores


def write_sample(model: Any, processor: Any, prompt: str, max_frames: int, dest: Path, temperature: float = 0.0) -> Path:
    """`prompt` spoken into the wav `dest`: greedy (the same prompt says the same), or sampled at `temperature`."""
    import soundfile
    import torch
    from transformers import LogitsProcessorList

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    device = next(base.parameters()).device
    inputs = processor(prompt, add_special_tokens=True).to(device)
    with torch.no_grad():
        audio = base.generate(**inputs, output_audio=True, max_new_tokens=max(1, max_frames),
                              logits_processor=LogitsProcessorList([NotEndFirst(int(base.config.codebook_eos_token_id))]),
                              **({"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}))
    dest.parent.mkdir(parents=True, exist_ok=True)
    draft = dest.with_name(f".{dest.name}")
    soundfile.write(draft, audio[0].reshape(-1).float().cpu().numpy(), int(base.codec_model.config.sampling_rate), format="WAV")
    draft.replace(dest)  # the page never fetches a half-written file
    return dest


def build_csm_trainer(config: WorkerConfig, device: Any, model: Any, processor: Any, prepared: Any, output_dir: Any,
                      callbacks: list[Any]) -> Any:
    from tunelab.worker.families.tts.trainer import build_sampling_trainer

    longest = prepared.longest_frames + 2  # room for a little more than the longest clip

    def speak(model: Any, dest: Path) -> Path:
        return write_sample(model, processor, prepared.sample_prompt, longest, dest)

    # Only the eval loss is wanted from evaluation: no logits gathered over the eval set.
    return build_sampling_trainer(config, device, model, processor, prepared, output_dir, callbacks, speak, CsmTrainer,
                                  prediction_loss_only=True)
