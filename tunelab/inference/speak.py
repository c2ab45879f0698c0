"""Speak with a finished text-to-speech run: text in, a wav out — `tunelab speak` calls
`speak_run(store, run_id, options)`; `POST /api/runs/{id}/speak` calls its two halves,
`prepare_speech` (every check, before a child starts: a refusal is a plain HTTP error) and
`speak_prepared` (the child), on a thread, with a cancel event it sets when its client goes
away and a progress callback (the child's stage, then the audio tokens written so far).

Torch-free, as chat and eval are on this side: the weights are the ones chat would load
(`target.resolve_target`, for a run of modality `tts` only: a text run is refused, naming
why), and the child that loads them (`inference.speak_child`) runs on the device the
inference rules choose (`devices.choose_device`: never a GPU a training run holds), with
the eval child's process handling (`child_process.ChildProcess`). Should a training run
claim the child's GPU meanwhile, the child is ended and the request refused, leaving the
GPU to the run. An Orpheus-style run needs the SNAC `codec/` beside its weights (found
before a model loads); a run of a family that speaks its own way (its spec's `speaker`, told
from the model's config: Sesame CSM) has its codec inside. The child writes the wav into a
temporary folder; its bytes come back. A cancel ends the child within a poll (SpeakCancelled).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from tunelab import families, paths
from tunelab.families.local_files import local_files
from tunelab.inference.devices import choose_device
from tunelab.inference.settings import MAX_NEW_TOKENS_LIMIT, load_timeout_s, max_time_s
from tunelab.inference.target import InferenceError, TargetInputError, TargetRefused, resolve_target

MAX_TEXT_CHARS = 2000
DEFAULT_AUDIO_TOKENS = 1200  # 171 frames: about 15 s of Orpheus's 24 kHz SNAC
POLL_S = 0.25  # how soon a cancel, or a training run claiming the device, ends the child


class SpeakFailed(InferenceError):
    """The child failed (CLI exit 1, HTTP 500)."""


class SpeakOptions(BaseModel):
    """What to say, and how."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(..., min_length=1, max_length=MAX_TEXT_CHARS, description="The words to speak.")
    checkpoint: int | None = Field(None, ge=0, le=2**62, description="Speak with checkpoint-N of the run instead of its final weights.")
    max_new_tokens: int = Field(DEFAULT_AUDIO_TOKENS, ge=7, le=MAX_NEW_TOKENS_LIMIT,
                                description="Longest speech, in audio tokens (Orpheus: 7 a codec frame; Sesame CSM: one per frame); "
                                            "generation also ends at the model's end of speech.")
    temperature: float = Field(0.0, ge=0, le=2, description="0 (greedy: the same text says the same) to 2.")


class SpeakCancelled(InferenceError):
    """The caller gave up (an HTTP client went away); the child was ended."""


@dataclass(frozen=True)
class SpeakProgress:
    """How far one speaking has come: `message` (loading, speaking on a device) and, while an
    Orpheus-style model speaks, the audio tokens written so far of at most `max_tokens`."""

    message: str
    tokens: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class PreparedSpeech:
    """A request checked up to the point of starting a child: what `speak_prepared` runs."""

    store: Any
    target: Any
    codec: Path | None
    options: SpeakOptions


def prepare_speech(store: Any, run_id: int, options: SpeakOptions) -> PreparedSpeech:
    """Every check that needs no model: the run, its weights and its codec (refusals name the fix)."""
    if not options.text.strip():
        raise TargetInputError("text", "the text is only blanks; give the words to speak")
    target = resolve_target(store.get_run(run_id), run_id, options.checkpoint, speech=True)
    own_way = target_family(target.child_request()).speaker is not None  # its codec is inside its weights
    from tunelab.export.codec import codec_beside  # here: the export package is not the server's to load at start

    codec = None if own_way else codec_beside(target.weights)
    if codec is None and not own_way:  # found before a model loads
        raise TargetRefused(f"{target.weights} and its run folder hold no codec/ folder (the SNAC codec a TTS run saves "
                            "beside its weights), so its audio tokens cannot become sound")
    return PreparedSpeech(store, target, codec, options)


def target_family(target: dict[str, Any]) -> families.FamilySpec:
    """The family of a child request's model, from its config as the parent reads it (never
    downloaded; an adapter folder has no config.json: its base's says)."""
    own = Path(target["weights"]) / "config.json"
    return families.detect(local_files(target["weights"] if own.is_file() else target["base_model"]))


def speak_run(store: Any, run_id: int, options: SpeakOptions, progress: Callable[[SpeakProgress], None] = lambda update: None,
              cancel: threading.Event | None = None) -> bytes:
    """The wav of `options.text` spoken by `run_id` (at the codec's rate)."""
    return speak_prepared(prepare_speech(store, run_id, options), progress, cancel)


def speak_prepared(prepared: PreparedSpeech, progress: Callable[[SpeakProgress], None] = lambda update: None,
                   cancel: threading.Event | None = None) -> bytes:
    """Speak a checked request in a child; `progress` hears how far it has come, and once
    `cancel` is set the child is ended within a poll (SpeakCancelled)."""
    options, target = prepared.options, prepared.target
    locks = paths.locks_dir(prepared.store.path)
    device, env = choose_device(locks)
    progress(SpeakProgress(f"speaking with {target.label} on {device}"))
    from tunelab.inference.child_process import ChildProcess

    with tempfile.TemporaryDirectory(prefix="tunelab-speak-") as folder:
        dest = Path(folder) / "speech.wav"
        request = {"target": target.child_request(), "codec": str(prepared.codec) if prepared.codec else None, "text": options.text,
                   "max_new_tokens": options.max_new_tokens, "temperature": options.temperature, "dest": str(dest)}
        child = ChildProcess(request, env, module="tunelab.inference.speak_child")
        try:
            _wait_done(child, locks, device, progress, cancel or threading.Event())
        finally:
            child.end()
        return dest.read_bytes()


def _wait_done(child: Any, locks: Path, device: str, progress: Callable[[SpeakProgress], None], cancel: threading.Event) -> None:
    limit_s = load_timeout_s() + max_time_s()  # loading, then one generation: as chat bounds them
    deadline = time.monotonic() + limit_s
    messages = child.watched_messages(
        locks, device, deadline, POLL_S,
        preempted=lambda holder: TargetRefused(f"{holder} started training on {device}; speaking was ended to leave the GPU "
                                               "to it. Try again when the run has finished"),
        timed_out=lambda: SpeakFailed(f"speaking took longer than {limit_s:.0f} s and was ended; ask for fewer max_new_tokens"),
        ended=lambda code: SpeakFailed(f"the speak process ended (exit code {code}) before finishing{child.tail()}"),
        given_up=lambda: SpeakCancelled("speaking was cancelled before it finished") if cancel.is_set() else None)
    for message in messages:
        kind = message.get("type")
        if kind == "progress":
            tokens, most = message.get("tokens"), message.get("max_tokens")
            progress(SpeakProgress(str(message.get("message")), int(tokens) if tokens is not None else None,
                                   int(most) if most is not None else None))
        elif kind == "error":
            text = str(message.get("message"))
            if message.get("refused"):
                raise TargetRefused(text)
            raise SpeakFailed(text + child.tail())
        elif kind == "done":
            return
