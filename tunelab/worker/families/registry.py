"""The training families by name, and `detect(config)`: which one trains a run's model.

Each family's training side is a folder here (model, data, collator, formats, trainer,
family) whose `family.py` holds a class satisfying the `TrainingFamily` Protocol
(`protocol.py`); the torch backend runs the same stages for every family and asks it only
the Protocol's members. `detect` picks the family from the model's own files, never its
name: the family specs (`tunelab/families`, in their precedence) name it, and `TRAINING`
maps that name to the family's training side. Adding a family: its folder here, its spec
under `tunelab/families/`, and its line in `TRAINING`.
"""

from __future__ import annotations

from typing import Any

from tunelab import families
from tunelab.families import FamilySpec
from tunelab.worker.families.audio_chat.family import AudioChatFamily
from tunelab.worker.families.csm.family import CsmFamily
from tunelab.worker.families.embedding.family import EmbeddingFamily
from tunelab.worker.families.model_files import model_files
from tunelab.worker.families.protocol import TrainingFamily
from tunelab.worker.families.speech.family import SpeechFamily
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.families.tts.family import TtsFamily
from tunelab.worker.families.vision.family import VisionFamily

# The training side of each family spec (tunelab/families), by the spec's name.
TRAINING: dict[str, type[TrainingFamily]] = {
    "text": TextFamily,
    "vision": VisionFamily,
    "embedding": EmbeddingFamily,
    "speech": SpeechFamily,
    "tts": TtsFamily,
    "csm": CsmFamily,
    "audio_chat": AudioChatFamily,
}


def family_spec(config: dict[str, Any]) -> FamilySpec:
    """The spec of the run's model's family, told from its own files (`families.detect`)."""
    return families.detect(model_files(config))


def detect(config: dict[str, Any]) -> TrainingFamily:
    """The run's family: the training side of the spec `families.detect` names."""
    return TRAINING[family_spec(config).name]()
