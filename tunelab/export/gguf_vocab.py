"""The tokenizer half of a GGUF file, read from a Hugging Face `tokenizer.json`.

GGUF's "gpt2" tokenizer model is byte-level BPE: the token strings exactly as the
tokenizer stores them (bytes mapped to printable characters, "Ġ" for a space), one type
per token, the merge rules as "left right" strings, and the special token ids. Only that
family is handled; any other tokenizer is refused with a message saying what to do.
The merges, special token ids, add-BOS flag and chat template are read from the saved
tokenizer folder by `gguf.SpecialVocab`, the reader llama.cpp's own converter uses
(it also encodes merges whose pieces contain spaces the way llama.cpp expects).
No torch, no transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import SpecialVocab, TokenType

from tunelab.export.plan import ExportInputError

# How the text is split before BPE runs, in llama.cpp's names. A plain ByteLevel
# pre-tokenizer applies GPT-2's split regex ("gpt-2"); Llama 3 splits with its own regex
# and then maps bytes without splitting again ("llama-bpe"). llama.cpp's "default" is a
# different split, so a tokenizer that matches neither is refused rather than guessed.
GPT2_PRE_TOKENIZER = "gpt-2"
LLAMA3_PRE_TOKENIZER = "llama-bpe"
LLAMA3_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                      r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class GGUFVocab:
    tokens: list[str]
    types: list[int]
    pre_tokenizer: str
    special: SpecialVocab  # merges, special token ids, add-token flags, chat template

    @property
    def merges(self) -> list[str]:
        return self.special.merges


def special_vocab(tokenizer_dir: Path) -> SpecialVocab:
    """Merges and special tokens of the tokenizer saved in `tokenizer_dir`."""
    try:
        special = SpecialVocab(tokenizer_dir, load_merges=True)
    except ValueError as exc:  # an unknown merges format, a negative special token id
        raise ExportInputError("format", f"gguf export cannot read this model's tokenizer ({exc}); export format merged and "
                                         "convert that folder with llama.cpp's convert_hf_to_gguf.py") from None
    # With neither tokenizer_config.json nor the post-processor saying so, a Hugging Face
    # tokenizer adds no BOS; say that explicitly rather than leave it to llama.cpp's default.
    special.add_special_token.setdefault("bos", False)
    return special


def byte_level_bpe_vocab(tokenizer_json: dict[str, Any], n_vocab: int, special: SpecialVocab) -> GGUFVocab:
    """The vocab for a model whose embedding has `n_vocab` rows; ids the tokenizer never
    uses become unused padding tokens, as llama.cpp's own converter writes them."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE" or not _uses_byte_level(tokenizer_json):
        kind = model.get("type") or "unknown"
        raise ExportInputError("format", f"gguf export handles byte-level BPE tokenizers only and this model's tokenizer is {kind} "
                                         "without byte-level pre-tokenization; export format merged and convert that folder with "
                                         "llama.cpp's convert_hf_to_gguf.py")
    by_id: dict[int, str] = {int(i): tok for tok, i in (model.get("vocab") or {}).items()}
    added = {int(t["id"]): t for t in tokenizer_json.get("added_tokens") or []}
    for token_id, entry in added.items():
        by_id[token_id] = entry["content"]
    too_high = [i for i in by_id if i >= n_vocab]
    if too_high:
        raise ExportInputError("format", f"the tokenizer has token id {max(too_high)} but the model's embedding has only {n_vocab} rows; "
                                         "the model and its tokenizer do not belong together")
    tokens, types = [], []
    for token_id in range(n_vocab):
        if token_id not in by_id:
            tokens.append(f"[PAD{token_id}]")
            types.append(TokenType.UNUSED)
        elif token_id in added:
            tokens.append(by_id[token_id])
            types.append(TokenType.CONTROL if added[token_id].get("special") else TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[token_id])
            types.append(TokenType.NORMAL)
    return GGUFVocab(tokens=tokens, types=[int(t) for t in types],
                     pre_tokenizer=_pre_tokenizer_name(tokenizer_json.get("pre_tokenizer")), special=special)


def _uses_byte_level(tokenizer_json: dict[str, Any]) -> bool:
    return any(_has_byte_level(tokenizer_json.get(part)) for part in ("pre_tokenizer", "decoder"))


def _has_byte_level(component: Any) -> bool:
    if not isinstance(component, dict):
        return False
    if component.get("type") == "ByteLevel":
        return True
    return any(_has_byte_level(c) for c in component.get("pretokenizers") or component.get("decoders") or [])


def _pre_tokenizer_name(pre_tokenizer: Any) -> str:
    if _is_byte_level(pre_tokenizer, use_regex=True):
        return GPT2_PRE_TOKENIZER
    parts = pre_tokenizer.get("pretokenizers") if isinstance(pre_tokenizer, dict) and pre_tokenizer.get("type") == "Sequence" else None
    if (parts and len(parts) == 2 and parts[0].get("type") == "Split"
            and (parts[0].get("pattern") or {}).get("Regex") == LLAMA3_SPLIT_REGEX and _is_byte_level(parts[1], use_regex=False)):
        return LLAMA3_PRE_TOKENIZER
    raise ExportInputError("format", "gguf export knows the GPT-2 and Llama 3 ways of splitting text before BPE and this tokenizer "
                                     "splits another way, which llama.cpp would not reproduce; export format merged and convert "
                                     "that folder with llama.cpp's convert_hf_to_gguf.py")


def _is_byte_level(component: Any, *, use_regex: bool) -> bool:
    return (isinstance(component, dict) and component.get("type") == "ByteLevel"
            and bool(component.get("use_regex", True)) == use_regex)
