"""A row's loss mask carried over to the token ids a multimodal processor made of it.

The row was tokenized before the processor expanded its media placeholders (`text_ids`,
`loss_mask`); the processor's ids differ from those wherever it wrote media tokens and
their markers. The two id sequences are aligned (difflib, where a whitespace token never
starts a match, so the row's "\n" is not paired with one the processor wrote elsewhere):
where they match, tokens keep their mask. Where they differ, the processor may also have inserted plain text beside its
markers — Gemma 3 writes "\\n\\n" before <start_of_image> — and a tokenizer with tokens
for whitespace runs then merges the row's own "\\n" with it into one token ("\\n\\n\\n"),
so a row token is gone although its text is still there. Such changed stretches are
aligned again by character: a processor token takes loss only if every character of it
is row text that takes loss (a token holding inserted text takes none), and row text that
takes loss must still be found in the processor's tokens — text the processor really
rewrote cannot be placed, and is an error rather than labels on the wrong tokens.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any

from tunelab.worker.context import RunSettingError


class LabelAligner:
    """Carries loss masks over to one tokenizer's processed ids (token texts cached by id)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def align(self, text_ids: list[int], loss_mask: list[int], processed: list[int]) -> tuple[list[int], int]:
        """The loss mask carried over to the processor's ids, and the end of the last inserted run."""
        mask = [0] * len(processed)
        last_inserted = 0
        # Whitespace tokens never start a match (difflib's "junk"; they still join the ends of
        # one): otherwise the row's "\n" pairs with a "\n" the processor wrote after the image.
        matcher = SequenceMatcher(self._is_space, text_ids, processed, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                mask[j1:j2] = loss_mask[i1:i2]
                continue
            if j2 > j1:
                last_inserted = j2
            if any(loss_mask[i1:i2]):
                mask[j1:j2] = self._changed_stretch(text_ids[i1:i2], loss_mask[i1:i2], processed[j1:j2])
        return mask, last_inserted

    def _changed_stretch(self, old: list[int], old_mask: list[int], new: list[int]) -> list[int]:
        """The mask of the processor's tokens `new` that replaced the row's tokens `old`,
        found by matching their characters."""
        old_pieces = [self._text(token) for token in old]
        new_pieces = [self._text(token) for token in new]
        old_text, new_text = "".join(old_pieces), "".join(new_pieces)
        # Per character: does it take loss (row side), which row character is it (processor side)?
        trained = [keep for piece, keep in zip(old_pieces, old_mask) for _ in piece]
        source: list[int | None] = [None] * len(new_text)
        found = [False] * len(old_text)
        for a, b, size in SequenceMatcher(None, old_text, new_text, autojunk=False).get_matching_blocks():
            for k in range(size):
                source[b + k] = a + k
                found[a + k] = True
        if any(keep and not seen for keep, seen in zip(trained, found)):
            raise RunSettingError("model_name", f"the model's processor rewrote text of this row beside its media placeholders "
                                                f"({old_text!r} became {new_text!r}), so the trained tokens cannot be placed "
                                                "exactly; check that the processor and chat template belong to this model")
        mask, start = [], 0
        for piece in new_pieces:
            chars = source[start:start + len(piece)]
            mask.append(int(bool(chars) and all(c is not None and trained[c] for c in chars)))
            start += len(piece)
        return mask

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token], skip_special_tokens=False,
                                                              clean_up_tokenization_spaces=False)
        return text

    def _is_space(self, token: int) -> bool:
        return not self._text(token).strip()
