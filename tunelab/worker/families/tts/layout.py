"""Orpheus's token layout for text-to-speech over SNAC codes, and telling such a model apart.

An Orpheus-style model is a causal LM whose vocabulary carries, after the text tokens,
added tokens named `<custom_token_N>`:
  N = 1 ... 7  control tokens: start/end of speech, start/end of the human turn,
               start/end of the AI turn, padding (CONTROL below)
  N = 10 + p * K + c   audio code `c` (0 <= c < K, K the codebook size: 4096 for
               Orpheus) at place `p` (0-6) of a frame.
A frame is SNAC's three codebooks over one coarse step, seven tokens in Orpheus's
order: coarse[i], mid[2i], fine[4i], fine[4i+1], mid[2i+1], fine[4i+2], fine[4i+3]
(`frames_to_offsets` / `offsets_to_codes`; an offset is N - 10).
A training row is laid out as Orpheus's own preparation lays it (its finetune data script
and its inference engine's prompt, ids as in Orpheus's Llama-3 vocabulary):
  <start_of_human> <BOS> text-tokens <end-of-text> <end_of_human>     128259 128000 ... 128009 128260
  <start_of_ai> <start_of_speech> audio-tokens <end_of_speech> <end_of_ai>   128261 128257 ... 128258 128262
The text is what the tokenizer writes with its special tokens (Llama 3 puts its BOS first;
one that adds none gets its BOS put there), the end-of-text is `<|eot_id|>` where the
vocabulary has it (Orpheus's 128009), else the tokenizer's EOS. Orpheus-compatible servers
send exactly the prompt half (`tts_data.prompt_ids`) and read audio up to <end_of_speech>.

A model is text-to-speech when its own files say so, never its name: its config.json
carries a `tunelab_tts` marker (what tunelab writes: `{"codec": "snac", "codebook_size": K}`),
or its tokenizer holds Orpheus's whole audio range (`<custom_token_10>` through
`<custom_token_28681>`). Those tests, and the layout's names they read, are defined once in
the torch-free family spec (`tunelab/families/tts.py`) and used here under the same names.
"""

from __future__ import annotations

from typing import Any

from tunelab.families.tts import (  # noqa: F401 - the layout's names, defined once beside detection
    AUDIO_BASE,
    FRAME,
    MARKER,
    ORPHEUS_CODEBOOK_SIZE,
    added_tokens,
    config_dict_is_tts,
    token_name,
    tokens_have_orpheus_range,
)

END_OF_TEXT = "<|eot_id|>"  # Llama 3's end of a turn: Orpheus ends the human's text with it (id 128009)
CONTROL = {"start_of_speech": 1, "end_of_speech": 2, "start_of_human": 3, "end_of_human": 4,
           "start_of_ai": 5, "end_of_ai": 6, "pad": 7}


def layout_tokens(codebook_size: int) -> list[str]:
    """Every token the layout adds to a text tokenizer, in id order."""
    return [token_name(n) for n in range(AUDIO_BASE + FRAME * codebook_size)]


def frames_to_offsets(coarse: list[int], mid: list[int], fine: list[int], codebook_size: int) -> list[int]:
    """SNAC's three code lists (lengths n, 2n, 4n) as Orpheus's interleaved audio offsets."""
    out: list[int] = []
    for i in range(len(coarse)):
        frame = (coarse[i], mid[2 * i], fine[4 * i], fine[4 * i + 1], mid[2 * i + 1], fine[4 * i + 2], fine[4 * i + 3])
        out.extend(place * codebook_size + int(code) for place, code in enumerate(frame))
    return out


def offsets_to_codes(offsets: list[int], codebook_size: int) -> tuple[list[int], list[int], list[int]]:
    """The inverse: whole frames only (a trailing partial frame is dropped)."""
    coarse: list[int] = []
    mid: list[int] = []
    fine: list[int] = []
    for start in range(0, len(offsets) - FRAME + 1, FRAME):
        c = [offsets[start + place] - place * codebook_size for place in range(FRAME)]
        coarse.append(c[0])
        mid.extend((c[1], c[4]))
        fine.extend((c[2], c[3], c[5], c[6]))
    return coarse, mid, fine


def codebook_size_of(model_config: dict[str, Any]) -> int:
    marker = model_config.get(MARKER)
    return int(marker.get("codebook_size") or ORPHEUS_CODEBOOK_SIZE) if isinstance(marker, dict) else ORPHEUS_CODEBOOK_SIZE
