#!/usr/bin/env bash
# Make the virtual env of the second tool bench/whole_run.py compares against: LLaMA-Factory
# from PyPI, in its OWN env (it pins transformers/trl/peft ranges that differ from tunelab's),
# on the CPU build of torch 2.13.0. Idempotent: a venv whose llamafactory-cli already runs is
# left alone. Rerun with FORCE=1 to rebuild it.
#
#   bash bench/setup_second_tool.sh            # default: /work/venvs/llamafactory
#   LLAMAFACTORY_VENV=/some/where bash bench/setup_second_tool.sh
#
# torch is pinned by a constraints file for the whole install, not only installed first:
# llamafactory pulls torchvision/torchaudio, whose newest releases want a newer torch, and
# pip would otherwise replace the CPU build with a multi-GB CUDA one to satisfy them.
set -euo pipefail

VENV="${LLAMAFACTORY_VENV:-/work/venvs/llamafactory}"
PYTHON="${PYTHON:-python3.11}"
TORCH="${TORCH_VERSION:-2.13.0}"

# "Works" = LLaMA-Factory's training path imports (transformers resolves PreTrainedModel lazily,
# so a broken torchvision only shows up there).
works() { "$VENV/bin/python" -c "import llamafactory.train.tuner, transformers; transformers.PreTrainedModel" 2>/dev/null; }

if [[ -z "${FORCE:-}" && -x "$VENV/bin/llamafactory-cli" ]] && works; then
    echo "LLaMA-Factory env already there: $VENV"
else
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    constraints="$VENV/torch-constraints.txt"
    echo "torch==$TORCH" > "$constraints"
    "$VENV/bin/pip" install --quiet -c "$constraints" "torch==$TORCH"
    # llamafactory's own pins choose transformers/trl/peft/datasets; torch stays the CPU build.
    "$VENV/bin/pip" install --quiet -c "$constraints" llamafactory
    # PyPI's torchvision is a CUDA build; next to the CPU torch its operators fail to register
    # ("operator torchvision::nms does not exist") and transformers then cannot import
    # PreTrainedModel. Text LoRA does not need it.
    "$VENV/bin/pip" uninstall --quiet -y torchvision
    # LLaMA-Factory imports torchaudio at module level (its audio plugin); torchaudio's last
    # release (2.11.1) has C extensions built for torch 2.11 that fail to load into 2.13
    # ("Could not load this library: .../_torchaudio.so"). Without them torchaudio imports as
    # "extension not available" (it checks for the files), which text training never needs.
    rm -f "$VENV"/lib/python3*/site-packages/torchaudio/lib/*.so
    works || { echo "LLaMA-Factory env at $VENV does not import; see the pip output above" >&2; exit 1; }
fi
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
print(", ".join(f"{n} {version(n)}" for n in ("llamafactory", "torch", "transformers", "peft", "trl", "datasets", "accelerate")))
PY
