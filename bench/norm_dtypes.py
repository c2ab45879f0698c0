"""Which dtype the normalisation layers return inside tunelab's bf16 runs (issue 36, item 3).

The question behind the seed's `cast_norm_output_to_input_dtype`: does a norm layer hand
fp32 activations to the next layer of a bf16 run (costing memory and speed), so that
tunelab would have to cast its output back to its input's dtype?

For each way tunelab lays out a bf16 run, the demo's Llama is loaded and wrapped by
tunelab's own code (`model_family`, `model_setup`), one batch goes forward and backward
under bf16 autocast as the Trainer runs it, and a hook on every RMSNorm records its
input, weight and output dtypes. Layouts:
  lora            frozen base in bf16, adapters in fp32 (`DeviceSettings.load_dtype`)
  full            every weight in fp32 (trained weights stay fp32), autocast to bf16
  qlora-layout    lora, then PEFT's `prepare_model_for_kbit_training` upcasting the
                  non-quantised weights (norms, embeddings, head) to fp32, as it does
                  on a 4-bit base; the linear layers stay unquantised here (4-bit needs
                  CUDA), which changes no norm's input: that comes from the residual
                  stream, whose dtype the fp32 embeddings set.
A norm "casts" when its output dtype differs from its input's: that is the case the
option exists for. `python bench/norm_dtypes.py [MODEL_DIR]` (default: the demo's Llama)
prints one line per layout and a JSON summary; on a CPU it takes seconds. With CUDA
visible it measures there, where autocast also runs `layer_norm` and `group_norm` in
fp32 (so an nn.LayerNorm model's norms do return fp32 under bf16 autocast).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from tunelab.demos.text import ensure_demo_assets  # noqa: E402
from tunelab.worker.families import registry as model_family  # noqa: E402
from tunelab.worker.model_setup import DeviceSettings  # noqa: E402
from tunelab.worker.run_config import worker_config  # noqa: E402

CUDA = torch.cuda.is_available()
BF16 = DeviceSettings(cuda=CUDA, precision="bf16", gradient_checkpointing=False)
LAYOUTS = {"lora": "lora", "full": "full", "qlora-layout": "lora"}


def norm_dtypes(model_dir: Path, layout: str) -> Counter:
    config = worker_config({"model_name": str(model_dir), "local_datasets": ["unused.jsonl"], "training_type": LAYOUTS[layout],
                            "lora_r": 8, "lora_alpha": 16})
    family = model_family.detect(config)
    loaded = family.load(config, BF16)
    model = loaded.model
    if layout == "qlora-layout":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model = family.wrap(model, config, BF16)
    seen: Counter = Counter()

    def record(module, inputs, output):
        seen[(str(inputs[0].dtype), str(module.weight.dtype), str(output.dtype))] += 1

    for module in model.modules():
        if type(module).__name__.endswith(("RMSNorm", "LayerNorm")) and getattr(module, "weight", None) is not None:
            module.register_forward_hook(record)
    device = "cuda" if CUDA else "cpu"
    model.to(device)
    ids = loaded.tokenizer(["What is two plus three?"] * 2, return_tensors="pt")["input_ids"].to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return seen


def main() -> None:
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_assets(Path(tempfile.mkdtemp()) / "assets").model_dir
    summary = {}
    for layout in LAYOUTS:
        seen = norm_dtypes(model_dir, layout)
        summary[layout] = [{"input": i, "weight": w, "output": o, "norms": n} for (i, w, o), n in sorted(seen.items())]
        casts = sum(n for (i, _, o), n in seen.items() if i != o)
        print(f"{layout:13} " + "; ".join(f"{n} norms: in {i}, weight {w} -> out {o}" for (i, w, o), n in sorted(seen.items()))
              + f"  | output dtype differs from input in {casts}")
    print(json.dumps({"device": "cuda" if CUDA else "cpu", "model": str(model_dir), "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                      "layouts": summary}))


if __name__ == "__main__":
    main()
