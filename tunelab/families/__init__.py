"""Model families: one `FamilySpec` per family, and the registry every "which family?" asks.

`detect(files)` walks `DETECTION`, the order the families' tests are asked in; the first
that passes names the model. The order is the precedence, and it matters:
  speech      before all: an encoder-decoder speech model can look like an audio chat one.
  csm         before tts: a CSM config carrying the text-to-speech marker passes both tests.
  tts         before the media families: only its marker or its tokenizer's audio range tell it.
  audio_chat  before vision: no vision sub-config, but a processor like one.
  vision      before embedding: a vision-language sentence-transformers folder is vision.
  embedding   before text: sentence-transformers' files, or a plain encoder.
  text        last: every model the others leave.
`FAMILIES` lists them in the order the house shows them (events.MODALITIES, the demo list,
the page's rules). Torch-free, imported by the server, the orchestrator, export, inference
and the worker alike; a new family is a module here and one line in each tuple.
"""

from __future__ import annotations

from tunelab.families import audio_chat, csm, embedding, speech, text, tts, vision
from tunelab.families.spec import FamilySpec, ModelFiles

__all__ = ["DETECTION", "FAMILIES", "FamilySpec", "ModelFiles", "all", "by_modality", "detect", "get", "modalities"]

FAMILIES: tuple[FamilySpec, ...] = (text.SPEC, vision.SPEC, embedding.SPEC, speech.SPEC, tts.SPEC, csm.SPEC, audio_chat.SPEC)
DETECTION: tuple[FamilySpec, ...] = (speech.SPEC, csm.SPEC, tts.SPEC, audio_chat.SPEC, vision.SPEC, embedding.SPEC, text.SPEC)
DEFAULT = text.SPEC
_BY_NAME = {spec.name: spec for spec in FAMILIES}


def all() -> tuple[FamilySpec, ...]:  # noqa: A001 - the registry's own word, as in get/all
    return FAMILIES


def get(name: str) -> FamilySpec:
    """The family called `name`; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no model family {name!r}; the families are {', '.join(_BY_NAME)}") from None


def detect(files: ModelFiles) -> FamilySpec:
    """The family of the model whose files these are (text when no other test passes)."""
    return next(spec for spec in DETECTION if spec.matches(files))


def modalities() -> tuple[str, ...]:
    """Every modality a run can record, once each, in `FAMILIES` order."""
    return tuple(dict.fromkeys(spec.modality for spec in FAMILIES))


def by_modality(modality: str | None) -> FamilySpec | None:
    """The first family that trains `modality` (for what a run's record names), or None."""
    return next((spec for spec in FAMILIES if spec.modality == modality), None)
