"""The speak child: `python -m tunelab.inference.speak_child`, one text spoken by one run.

Protocol (the parent side is `speak.speak_run`; the eval child's shape): the parent writes
one JSON line
  {"target": ModelTarget.child_request(), "codec": folder or null, "text", "max_new_tokens", "temperature", "dest"}
and the child answers with JSON lines on its real stdout:
  {"type": "progress", "message", "tokens"?, "max_tokens"?}   tokens: audio tokens written so far
                                                              (Orpheus-style, every half second)
  {"type": "error", "message", "refused"?}   then it exits (2: refused, 1: failed)
  {"type": "done", "seconds", "rate"}        the wav is at `dest`
A model whose family speaks its own way (its spec's `speaker`, told from the model's config:
Sesame CSM, with the Mimi codec inside it) speaks through the module that spec names; any
other is Orpheus-style: the weights load as chat loads them (`generate.load_model`: the adapter on its base, or the
full model); the layout comes from the model's config and tokenizer (`tts_model`), the
codec from the `codec/` the parent found beside the weights (a checkpoint's in its run
folder, as export finds it), and the speech is synthesised as the run's eval samples are (`tts_sample`),
from the prompt Orpheus's own engine sends (`tts_data.prompt_ids`); a speaker is asked for as
Orpheus asks, by starting the text with "name: ".
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from tunelab.inference.child_process import line_sender


TOKENS_EVERY_S = 0.5


class Refused(Exception):
    """This model cannot speak here; the message says why."""


def _codec(request: dict[str, Any]) -> Any:
    from tunelab.worker.context import RunSettingError
    from tunelab.worker.families.tts.codec import load_codec
    from tunelab.worker.run_config import model_reference

    try:
        return load_codec(model_reference(request["target"]["base_model"], tts_codec=request["codec"]))
    except RunSettingError as exc:
        raise Refused(exc.message) from exc


def speak(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
    import soundfile

    from tunelab.inference.speak import target_family

    # The family is told from the model's config: one that speaks its own way names the module that does.
    speaker = target_family(request["target"]).speaker
    dest = _speak_own_way(speaker, request, send) if speaker else _speak_orpheus(request, send)
    info = soundfile.info(str(dest))
    send({"type": "done", "seconds": info.frames / info.samplerate, "rate": info.samplerate})


def _speak_own_way(speaker: str, request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> Path:
    from tunelab.inference.generate import _quiet_libraries

    _quiet_libraries()  # as chat's load does, before the family's module loads its model
    return importlib.import_module(speaker).speak(request, send)


def _speak_orpheus(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> Path:
    from tunelab.inference.generate import load_model
    from tunelab.worker.context import RunSettingError
    from tunelab.worker.families.tts.data import prompt_ids
    from tunelab.worker.families.tts.model import check_codec_matches, layout_of, model_config_dict
    from tunelab.worker.families.tts.sample import write_sample
    from tunelab.worker.run_config import model_reference

    target = request["target"]
    send({"type": "progress", "message": "loading the model"})
    loaded = load_model(target)
    # An adapter folder has no config.json: the layout's codebook size is its base's.
    own = Path(target["weights"]) / "config.json"
    model_config = model_config_dict(model_reference(target["weights"] if own.is_file() else target["base_model"]))
    try:
        layout = layout_of(loaded.tokenizer, model_config)
        codec = _codec(request)
        check_codec_matches(layout, codec)
    except RunSettingError as exc:
        raise Refused(exc.message) from exc
    room = getattr(loaded.model.config, "max_position_embeddings", None)
    tokens = int(request["max_new_tokens"])
    if room:  # the prompt and the speech together stay within the model's positions
        tokens = min(tokens, int(room) - len(prompt_ids(loaded.tokenizer, layout, request["text"])))
    message = f"speaking on {loaded.device}"
    send({"type": "progress", "message": message, "tokens": 0, "max_tokens": tokens})
    return write_sample(loaded.model, loaded.tokenizer, layout, codec, request["text"], tokens, Path(request["dest"]),
                        float(request.get("temperature") or 0.0), on_token=_every(TOKENS_EVERY_S, lambda made: send(
                            {"type": "progress", "message": message, "tokens": made, "max_tokens": tokens})))


def _every(seconds: float, report: Callable[[int], None]) -> Callable[[int], None]:
    """`report`, called at most once per `seconds` (a token takes milliseconds; a line each would flood the pipe)."""
    last = [0.0]

    def maybe(made: int) -> None:
        now = time.monotonic()
        if now - last[0] >= seconds:
            last[0] = now
            report(made)

    return maybe


def main() -> int:
    send = line_sender(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)  # libraries print to stdout now and then; the real stdout carries only the protocol
    line = sys.stdin.readline()
    if not line:
        return 0
    from tunelab.inference.generate import LoadRefused

    try:
        speak(json.loads(line), send)
    except (Refused, LoadRefused) as exc:
        send({"type": "error", "message": str(exc), "refused": True})
        return 2
    except Exception as exc:  # noqa: BLE001 - any failure becomes a message for the parent
        traceback.print_exc()
        send({"type": "error", "message": f"speaking failed: {type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # tearing down torch's interpreter state takes seconds and saves nothing
