"""The text family: a causal language model and its tokenizer, what every other test leaves.

No test of its own: a model no other family claims is a text model (the registry asks it
last). It is the one family both backends train, the one the demos start with, and the
shape every chat, evaluation and GGUF export was first written for.
"""

from __future__ import annotations

from tunelab.families.spec import FamilySpec, ModelFiles


def _any_model(files: ModelFiles) -> bool:
    return True


SPEC = FamilySpec(name="text", modality="text", words="a text model", matches=_any_model,
                  auto_class="AutoModelForCausalLM", demo="text", demo_builder="tunelab.demos.text")
