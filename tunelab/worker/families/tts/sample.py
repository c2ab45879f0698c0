"""One spoken sample: the model writes codec tokens for a sentence, SNAC turns them into a wav.

Generation is greedy and held to the layout (a `prefix_allowed_tokens_fn`): at place p of
a frame only the audio tokens of place p may come, and <end_of_speech> only at a frame's
start after at least one frame — so even an untrained model's output decodes. It stops
at <end_of_speech> or after `max_audio_tokens`. The wav lands in
`<output_dir>/samples/step-<N>.wav` at the codec's rate; the API serves it and the page plays it.
`tunelab speak` and `POST /api/runs/{id}/speak` synthesise through it too (`inference.speak_child`),
greedy or sampled at a temperature, counting the tokens as they come (the page's progress).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tunelab.worker.families.tts.layout import FRAME, offsets_to_codes

SAMPLES_FOLDER = "samples"


def sample_path(output_dir: Path, step: int) -> Path:
    return Path(output_dir) / SAMPLES_FOLDER / f"step-{step}.wav"


def generate_offsets(model: Any, prompt: list[int], layout: Any, max_audio_tokens: int, temperature: float = 0.0,
                     on_token: Callable[[int], None] | None = None) -> list[int]:
    """The audio offsets the model writes for `prompt`: greedy, or sampled at `temperature` > 0.
    `on_token(n)` is told before each new token how many it has written so far."""
    import torch

    size, start, end = layout.codebook_size, layout.audio_start, layout.control["end_of_speech"]
    places = [list(range(start + p * size, start + (p + 1) * size)) for p in range(FRAME)]

    def allowed(_batch: int, ids: Any) -> list[int]:
        made = len(ids) - len(prompt)
        if on_token is not None:  # asked once per new token: the cheapest place to count them
            on_token(made)
        place = made % FRAME
        return places[place] + [end] if place == 0 and made else places[place]

    device = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt], device=device), attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device=device),
                             max_new_tokens=max_audio_tokens, prefix_allowed_tokens_fn=allowed,
                             **({"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}),
                             eos_token_id=end, pad_token_id=layout.control["pad"])
    return layout.offsets(out[0, len(prompt):].tolist())


def write_sample(model: Any, tokenizer: Any, layout: Any, codec: Any, text: str, max_audio_tokens: int, dest: Path,
                 temperature: float = 0.0, on_token: Callable[[int], None] | None = None) -> Path:
    import soundfile

    from tunelab.worker.families.tts.data import prompt_ids

    offsets = generate_offsets(model, prompt_ids(tokenizer, layout, text), layout, max(FRAME, max_audio_tokens), temperature, on_token)
    audio = codec.decode(*offsets_to_codes(offsets, layout.codebook_size))
    dest.parent.mkdir(parents=True, exist_ok=True)
    draft = dest.with_name(f".{dest.name}")
    soundfile.write(draft, audio, codec.rate, format="WAV")
    draft.replace(dest)  # the page never fetches a half-written file
    return dest
