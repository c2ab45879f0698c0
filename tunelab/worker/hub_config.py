"""Reading a run's model from the hub or a folder: the keyword arguments and the config.

The vision, speech and audio chat families each tell their models apart by the model's
own config and load an `AutoProcessor` for it; the hub arguments (token, remote code), the
config read that leaves errors to the model load, the processor load that names the
missing files, and the tokenizer set-up the media chat collators rely on live here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def hub_kwargs(config: WorkerConfig) -> dict[str, Any]:
    """The `from_pretrained` arguments a run's settings give: its hub token and remote-code choice."""
    return {"token": config.hf_token or None, "trust_remote_code": config.trust_remote_code}


def model_config_or_none(config: WorkerConfig) -> Any:
    """The run's model config, or None where it does not load (the model load reports the
    real problem, in its own words)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(config.model_name, **hub_kwargs(config))
    except (OSError, ValueError, KeyError):
        return None


def load_auto_processor(config: WorkerConfig, kind: str, files: str) -> Any:
    """`AutoProcessor` for the run's model; one that does not load is a `model_name` error
    saying the model is a `kind` whose folder needs `files`."""
    from transformers import AutoProcessor

    name = config.model_name
    try:
        return AutoProcessor.from_pretrained(name, **hub_kwargs(config))
    except (OSError, ValueError) as exc:
        raise RunSettingError("model_name", f"{name} is {kind} but its processor does not load ({exc}); "
                                            f"the model folder needs its processor files ({files})") from exc


def set_up_chat_tokenizer(processor: Any) -> Any:
    """A media chat processor's tokenizer made ready for the collators (vision, audio chat):
    a pad token, right padding, and the tokenizer's chat template on the processor where it
    has none. Returns the tokenizer."""
    tokenizer = processor.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.padding_side = "right"  # the collator's label alignment reads each row from its start
    if not getattr(processor, "chat_template", None) and getattr(tokenizer, "chat_template", None):
        processor.chat_template = tokenizer.chat_template
    return tokenizer
