"""sentence-transformers' trainer, taught to resume an adapter run from its checkpoint.

A LoRA embedding run's checkpoints hold the adapter alone (`adapter_model.safetensors`,
as PEFT saves it). The library's resume reloads the whole model from the checkpoint
folder through transformers' PEFT integration (which needs a newer peft than the pinned
one); here the adapter weights are loaded straight into the adapter being trained. A
full fine-tuning checkpoint resumes the library's own way. `merge_adapter` folds the
adapter into the encoder for the final sentence-transformers folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformerTrainer

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _adapter_model(model: Any) -> Any | None:
    from peft import PeftModel

    encoder = getattr(model[0], "model", None)
    return encoder if isinstance(encoder, PeftModel) else None


class EmbeddingTrainer(SentenceTransformerTrainer):
    def _load_from_checkpoint(self, checkpoint_path: str, model: Any = None) -> None:
        adapter = _adapter_model(self.model)
        weights = Path(checkpoint_path) / ADAPTER_WEIGHTS
        if adapter is None or not weights.is_file():
            super()._load_from_checkpoint(checkpoint_path)
            return
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        result = set_peft_model_state_dict(adapter, load_file(str(weights)))
        missing_lora = [name for name in result.missing_keys if "lora_" in name]
        if missing_lora:
            raise ValueError(f"{weights} lacks adapter weights this run trains ({missing_lora[:3]}…); "
                             "resume with the settings (lora_r, target_modules) the checkpoint was trained with")


def merge_adapter(model: Any) -> None:
    """Fold a LoRA adapter into the encoder (in place), leaving a plain sentence-transformers model."""
    adapter = _adapter_model(model)
    if adapter is not None:
        model[0].model = adapter.merge_and_unload()
