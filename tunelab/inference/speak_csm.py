"""Speaking with a Sesame CSM run, in the speak child: CSM's own generation and its Mimi codec.

A CSM model carries its codec inside its weights, so there is no `codec/` to find: the
model loads as `CsmForConditionalGeneration` (an adapter on its base, as chat loads one),
its processor from the run folder the run saved it into (else the base model's), and the
text is spoken as the run's eval samples are (`csm_trainer.write_sample`:
`generate(..., output_audio=True)`, as speaker 0 unless the text starts with "[N]").
`max_new_tokens` counts CSM's frames, the unit of its generation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

SPEAKER_TAG = re.compile(r"\[\d+\]")  # CSM's "[N]": the text names its speaker


def is_csm_target(target: dict[str, Any]) -> bool:
    """Whether the target's model is a CSM model (its config's model_type, as the worker tells it)."""
    from tunelab.worker.families.tts.model import is_csm_model
    from tunelab.worker.run_config import model_reference

    own = Path(target["weights"]) / "config.json"  # an adapter folder has none: its base's says
    return is_csm_model(model_reference(target["weights"] if own.is_file() else target["base_model"]))


def speak_csm(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> Path:
    import torch
    from transformers import AutoProcessor, CsmForConditionalGeneration

    from tunelab.inference.generate import _quiet_libraries
    from tunelab.worker.families.csm.model import speaker_prompt
    from tunelab.worker.families.csm.trainer import write_sample

    _quiet_libraries()
    target = request["target"]
    send({"type": "progress", "message": "loading the model"})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    adapter = target["kind"] == "adapter"
    model = CsmForConditionalGeneration.from_pretrained(target["base_model"] if adapter else target["weights"]).to(device)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, target["weights"])
    try:
        processor = AutoProcessor.from_pretrained(target["weights"])
    except (OSError, ValueError):  # a checkpoint without the processor: the base model's
        processor = AutoProcessor.from_pretrained(target["base_model"])
    text = request["text"].strip()
    prompt = text if SPEAKER_TAG.match(text) else speaker_prompt(text)
    send({"type": "progress", "message": f"speaking on {device}"})
    return write_sample(model.eval(), processor, prompt, int(request["max_new_tokens"]), Path(request["dest"]),
                        float(request.get("temperature") or 0.0))
