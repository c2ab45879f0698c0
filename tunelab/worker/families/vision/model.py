"""Telling a vision-language model from a text model, and loading one with its processor.

A model is vision-language when its own config says so — never its name: its model
type maps to `AutoModelForImageTextToText`, remote code registers that auto class, or
the config carries a vision sub-config: the family's spec (`tunelab/families/vision.py`)
tells it, for the worker's registry, the mlx backend and the parent's start checks alike. Such a model loads through
`AutoModelForImageTextToText` with its `AutoProcessor` (image processor + tokenizer +
chat template). Where torchvision is missing (a CPU-only torch), transformers falls back to
each image processor's PIL backend by itself, but a processor that also handles video
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...) cannot be built at all: its video processor needs
torchvision. Training reads images only, so such a processor loads without its video
part (`images_only`), from the same files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.families import vision
from tunelab.worker.context import RunSettingError
from tunelab.worker.hub_config import hub_kwargs, set_up_chat_tokenizer

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def torchvision_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchvision") is not None


def images_only(processor_class: Any) -> Any:
    """`processor_class` with its video sub-processors left out. A processor's parts are the
    `__init__` arguments `get_attributes` names; without the video one, loading never asks
    for a video processor, and the processor handles images and text as before (it only
    touches its video processor when given videos). Saved, it still names the original
    class, so the exported processor reloads as the model's own."""

    if processor_class in _IMAGES_ONLY:
        return _IMAGES_ONLY[processor_class]

    class ImagesOnly(processor_class):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return [name for name in super().get_attributes() if "video" not in name]

        def __reduce__(self) -> tuple[Any, ...]:
            # Pickled by the original class (datasets fingerprints the mapping function, a
            # data loader's workers receive the collator): this class is made at run time.
            return _restore_images_only, (processor_class, self.__dict__)

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = processor_class.__name__
    _IMAGES_ONLY[processor_class] = ImagesOnly
    return ImagesOnly


_IMAGES_ONLY: dict[Any, Any] = {}


def _restore_images_only(processor_class: Any, state: dict[str, Any]) -> Any:
    processor = object.__new__(images_only(processor_class))
    processor.__dict__.update(state)
    return processor


def _processor_class(config: WorkerConfig) -> Any:
    """The processor class transformers maps this model's config to, or None (remote code)."""
    from transformers import AutoConfig
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING

    model_config = AutoConfig.from_pretrained(config.model_name, **hub_kwargs(config))
    return PROCESSOR_MAPPING[type(model_config)] if type(model_config) in PROCESSOR_MAPPING else None


def auto_processor(config: WorkerConfig) -> Any:
    """`AutoProcessor` for `config.model_name`, images-only where torchvision is missing and
    the processor would otherwise need it for video."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(config.model_name, **hub_kwargs(config))
    except Exception:
        processor_class = None if torchvision_installed() else _processor_class(config)
        if processor_class is None or not any("video" in name for name in processor_class.get_attributes()):
            raise  # not the missing video processor: the caller words the error
    return images_only(processor_class).from_pretrained(config.model_name, **hub_kwargs(config))


def eval_rows(config: WorkerConfig, processor: Any, model: Any, raw: Any) -> Any:
    """The eval child's rows for its loss (its spec's `processor` names this module): the
    eval split prepared as training prepares its rows (`data.prepare`)."""
    from tunelab.worker.families.vision.data import prepare

    return prepare(config, processor, raw)


def load_processor(config: WorkerConfig) -> Any:
    from transformers import ProcessorMixin

    try:
        processor = auto_processor(config)
    except (OSError, ValueError) as exc:
        raise RunSettingError("model_name", f"{config.model_name} is a vision-language model but its processor does not load ({exc}); "
                                       "the model folder needs its processor files (preprocessor_config.json / processor_config.json)") from exc
    except ImportError as exc:  # a processor class that itself requires a missing package (Pixtral's needs torchvision)
        raise RunSettingError("model_name", f"{config.model_name}'s processor needs a package that is not installed ({' '.join(str(exc).split())}); "
                                            "install it (for torchvision: the build that matches the installed torch)") from exc
    if not isinstance(processor, ProcessorMixin) or getattr(processor, "tokenizer", None) is None:
        raise RunSettingError("model_name", f"{config.model_name} is a vision-language model but ships no processor with a tokenizer; "
                                       "save the model together with its AutoProcessor")
    set_up_chat_tokenizer(processor)
    return processor


def model_class() -> Any:
    """The class the family spec names (`vision.SPEC.auto_class`)."""
    import transformers

    return getattr(transformers, vision.SPEC.auto_class)
