"""How long an Orpheus clip may be, known before the first one is encoded (`tts_encode` checks them).

Too long means more audio than `max_seq_length` leaves room
for after the row's text; SNAC writes a fixed number of tokens per stretch of audio, so
that room is a length in seconds (`seconds_room`, from the codec's config.json), checked from the clip's header before
it is encoded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tunelab.worker.families.tts.layout import FRAME

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


def longest_clips(codec: Any, rooms: list[int]) -> list[float]:
    """The seconds of audio each row may have: `rooms[i]`, the audio tokens row i's text leaves."""
    settings = codec_settings(codec.folder)
    return [seconds_room(settings, room) for room in rooms]
