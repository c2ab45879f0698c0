"""Which clips of a text-to-speech split can train, found before the first one is encoded.

Every row's clip is checked as speech-to-text checks its clips (`speech_data.checked_clip`:
missing, unreadable, empty or too long is a `BadAudioRow` naming the row, the path and the
field; a path outside a served run's data roots is refused, never skipped) — all of them
before the codec encodes any, so a bad clip is reported before minutes of codec work,
never halfway through it. Too long means more audio than `max_seq_length` leaves room
for after the row's text; SNAC writes a fixed number of tokens per stretch of audio, so
that room is a length in seconds (`seconds_room`, from the codec's config.json), checked from the clip's header before
it is encoded. With `skip_bad_audio` a bad row's entry is its reason, `"<path>: <kind>"`
(as speech-to-text's skip note says it), and `tts_data` leaves the row out.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tunelab.worker.speech_data import SKIP_HINT, BadAudioRow, ClipPlace, checked_clip
from tunelab.worker.tts_layout import FRAME

# What SNAC's constructor takes when its config.json leaves a setting out.
SNAC_DEFAULTS = {"sampling_rate": 44100, "encoder_rates": [3, 3, 7, 7], "attn_window_size": 32, "vq_strides": [8, 4, 2, 1]}


def seconds_room(settings: dict[str, Any], audio_tokens: int) -> float:
    """The longest clip whose codes fit in `audio_tokens` tokens, for a SNAC codec whose
    config.json holds `settings`. SNAC pads a clip to whole blocks of
    `hop * lcm(coarse stride, attention window)` samples (hop: the product of its encoder
    rates), and a block is `lcm / coarse stride` coarse frames of FRAME tokens each."""
    stride = int(settings.get("vq_strides", SNAC_DEFAULTS["vq_strides"])[0])
    window = settings.get("attn_window_size", SNAC_DEFAULTS["attn_window_size"])
    lcm = math.lcm(stride, int(window or 1))
    hop = math.prod(int(rate) for rate in settings.get("encoder_rates", SNAC_DEFAULTS["encoder_rates"]))
    blocks = max(audio_tokens, 0) // (FRAME * (lcm // stride))
    return blocks * hop * lcm / float(settings.get("sampling_rate", SNAC_DEFAULTS["sampling_rate"]))


def codec_settings(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "config.json").read_text())


def check_clips(raw_refs: list[Any], place: ClipPlace, rooms: list[int], codec: Any, skip_bad: bool,
                max_seq_length: int) -> list[dict[str, Any] | str]:
    """Each row's clip reference, checked; with `skip_bad` a bad row's reason instead.
    `rooms[i]`: the audio tokens row i's text leaves of `max_seq_length`."""
    checked: list[dict[str, Any] | str] = []
    settings = codec_settings(codec.folder)
    for index, (raw_ref, room) in enumerate(zip(raw_refs, rooms)):
        longest = seconds_room(settings, room)
        limit = f"max_seq_length {max_seq_length} (raise it for longer clips) leaves this row's audio"
        try:
            checked.append(checked_clip(raw_ref, index, place, longest, SKIP_HINT, limit))
        except BadAudioRow as exc:
            if not skip_bad:
                raise
            checked.append(f"{exc.shown}: {exc.kind}")
    return checked
