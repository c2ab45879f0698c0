"""The eval child: `python -m tunelab.evaluate.child`, one evaluation of one run.

Protocol (the parent side is `runner.run_eval`): the parent writes one JSON line
  {"target": ModelTarget.child_request(), "config": the run's stored config, "cache_dir",
   "perplexity": bool, "generations": bool, "prompts": [..] | null (null: from the eval
   split), "max_prompts", "sampling": {...}, "max_time_s", "tasks": [..], "task_path", "limit"}
and the child answers with JSON lines on its real stdout:
  {"type": "progress", "message"}
  {"type": "result", "kind": "perplexity" | "generations" | "lm_eval", "payload": {...}}
A run that reads images or audio is measured by `measure_media`: its loss through its
family's collator, a vision run's answers to the eval rows' images, and a speech-to-text
run's transcripts of the eval clips with their word error rate (in the generations payload).
  {"type": "error", "message", "field"?}   then it exits (2: refused as asked, 1: failed)
  {"type": "done"}
Libraries print to stdout now and then, so it is moved to stderr, as in the inference child.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from tunelab.inference.child_process import line_sender


def evaluate(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
    from tunelab.evaluate import measure, measure_media
    from tunelab.inference.generate import load_model
    from tunelab.worker.data.formats import DataFormatError
    from tunelab.worker.run_config import stored_config

    def progress(message: str) -> None:
        send({"type": "progress", "message": message})

    config = stored_config(request["config"])  # the run's stored config, read as its worker read it
    manager = None
    if request.get("tasks"):
        from tunelab.evaluate.harness import find_tasks

        progress("finding the lm-eval tasks")
        manager = find_tasks(request["tasks"], request.get("task_path"))  # a misspelt task fails before the model loads
    progress("loading the model")
    # A speech-to-text run transcribes with the language its training set (speech_language).
    loaded = load_model({**request["target"], "speech_language": config.speech_language})
    media = loaded.family  # a model read through its processor (media_models.MediaFamily), None for a text model
    transcribes = media is not None and media.serves == "transcribe"  # a speech-to-text run's generations are transcripts
    raw = None
    if request.get("perplexity") or (request.get("generations") and (request.get("prompts") is None or transcribes)):
        progress("reading the eval split")
        raw = measure.eval_data(config, Path(request["cache_dir"]))
    if request.get("perplexity"):
        progress("measuring loss on the eval split")
        payload = measure_media.loss(loaded, config, raw) if media else measure.perplexity(loaded, config, raw)
        send({"type": "result", "kind": "perplexity", "payload": {**payload, "device": loaded.device}})
    max_prompts = int(request.get("max_prompts") or measure.DEFAULT_PROMPTS)
    if request.get("generations") and transcribes:
        payload = measure_media.transcripts(loaded, config, raw, max_prompts, int(request["sampling"]["max_new_tokens"]), progress)
        send({"type": "result", "kind": "generations", "payload": {**payload, "sampling": request["sampling"]}})
    elif request.get("generations"):
        prompts = request.get("prompts")
        source = "file" if prompts is not None else "eval split"
        if prompts is None and media is not None and media.media is not None:
            prompts = measure_media.media_prompts(raw, config, media.media, max_prompts)
        elif prompts is None:
            prompts = measure.default_prompts(raw, config, max_prompts)
        if not prompts:
            raise DataFormatError("prompts_file", "no eval row has an assistant turn to cut a prompt from; give a prompts file")
        items = measure.generations(loaded, prompts, request["sampling"], float(request["max_time_s"]), progress)
        send({"type": "result", "kind": "generations",
              "payload": {"source": request.get("prompts_file") or source, "sampling": request["sampling"],
                          "items": [measure_media.without_media_data(item) for item in items]}})
    if request.get("tasks"):
        from tunelab.evaluate.harness import run_tasks

        progress(f"running lm-eval tasks {', '.join(request['tasks'])}")
        send({"type": "result", "kind": "lm_eval", "payload": run_tasks(loaded, manager, request["tasks"], request.get("task_path"), request.get("limit"))})


def main() -> int:
    send = line_sender(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)
    line = sys.stdin.readline()
    if not line:
        return 0
    from tunelab.inference.generate import GenerationInputError, LoadRefused
    from tunelab.worker.data.formats import DataFormatError

    try:
        evaluate(json.loads(line), send)
    except DataFormatError as exc:
        send({"type": "error", "message": exc.message, "field": exc.field})
        return 2
    except (LoadRefused, GenerationInputError) as exc:
        send({"type": "error", "message": str(exc), "field": getattr(exc, "field", None)})
        return 2
    except Exception as exc:  # noqa: BLE001 - any failure becomes a message for the parent
        traceback.print_exc()
        send({"type": "error", "message": f"evaluation failed: {type(exc).__name__}: {exc}"})
        return 1
    send({"type": "done"})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # tearing down torch's interpreter state takes seconds and saves nothing
