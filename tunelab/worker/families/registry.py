"""The training families by name, and `detect(config)`: which one trains a run's model.

Each family's training side is a folder here (model, data, collator, formats, trainer,
family) whose `family.py` holds a class satisfying the `TrainingFamily` Protocol
(`protocol.py`) and says what the family is; the torch backend runs the same stages for
every family and asks it only the Protocol's members. `detect` picks the family from the
model's own files (`speech/model.is_speech_model`, `vision/model.is_vision_model`, ...),
never its name; a model nothing else claims is text. Adding a family: its folder, its
line in TRAINING, and its branch of `detect`.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.families.audio_chat.family import AudioChatFamily
from tunelab.worker.families.csm.family import CsmFamily
from tunelab.worker.families.embedding.family import EmbeddingFamily
from tunelab.worker.families.protocol import TrainingFamily
from tunelab.worker.families.speech.family import SpeechFamily
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.families.tts.family import TtsFamily
from tunelab.worker.families.vision.family import VisionFamily

TRAINING: dict[str, type[TrainingFamily]] = {
    "text": TextFamily,
    "vision": VisionFamily,
    "embedding": EmbeddingFamily,
    "speech": SpeechFamily,
    "tts": TtsFamily,
    "csm": CsmFamily,
    "audio_chat": AudioChatFamily,
}


def detect(config: dict[str, Any]) -> TrainingFamily:
    """The run's family: speech-to-text, text-to-speech, audio chat, vision-language, embedding, or (otherwise) text."""
    from tunelab.worker.families.embedding import model as embedding_model
    from tunelab.worker.families.speech import model as speech_model
    from tunelab.worker.families.vision import model as vision_model

    if speech_model.is_speech_model(config):
        return TRAINING["speech"]()
    from tunelab.worker.families.tts import model as tts_model

    if tts_model.is_csm_model(config):
        return TRAINING["csm"]()
    if tts_model.is_tts_model(config):
        return TRAINING["tts"]()
    from tunelab.worker.families.audio_chat import model as audio_chat_model

    if audio_chat_model.is_audio_chat_model(config):  # before vision: no vision sub-config, but a processor like one
        return TRAINING["audio_chat"]()
    if vision_model.is_vision_model(config):
        return TRAINING["vision"]()
    if embedding_model.is_embedding_model(config):
        return TRAINING["embedding"]()
    return TRAINING["text"]()
