"""Saving what a LoftQ adapter is trained against, so an export merges into the same.

LoftQ starts the adapter from the quantisation error of each adapted weight: without
4-bit loading PEFT replaces the weight by its quantised form, with it the run trains on
the 4-bit base. Either way the original weights are not what the adapter completes, and
a merge into them is off by the quantisation error. The adapted layers' weights, as the
run holds them (dequantised from 4-bit where needed), go to `run_facts.LOFTQ_BASE` in
the run folder, named as in the base model's own state dict; export loads them over the
base before merging. It costs disk: the adapted layers in the half type, for the usual
all-projection targets most of the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunelab.run_facts import LOFTQ_BASE

PEFT_PREFIX = "base_model.model."


def save_loftq_base(model: Any, output_dir: Path) -> Path:
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.integrations import dequantize_module_weight
    from safetensors.torch import save_file

    tensors = {}
    for name, module in model.named_modules():
        if isinstance(module, BaseTunerLayer):
            weight = dequantize_module_weight(module.get_base_layer())
            tensors[f"{name.removeprefix(PEFT_PREFIX)}.weight"] = weight.detach().to("cpu").contiguous()
    path = Path(output_dir) / LOFTQ_BASE
    save_file(tensors, str(path))
    return path
