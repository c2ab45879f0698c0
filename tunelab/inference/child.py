"""The inference child: `python -m tunelab.inference.child`, one model, requests on stdin.

Protocol, one JSON object per line (the parent side is `client.InferenceChild`):
parent -> child
  first line  {"op": "load", "run_id", "kind", "weights", "base_model", "trust_remote_code", "modality", "image_size"}
  {"op": "generate", "id", "messages" | "prompt", "adapter": bool, "sampling": {...}, "max_time_s"}
              (a message's content is text, or for a model that reads images or audio a list of
              {"type": "text", "text"} and {"type": "image" | "audio", "data": base64} parts)
  {"op": "stop", "id"}   ends that generation at its next token (or drops it while queued)
  end of input           stops the generation in progress; the child exits
child -> parent
  {"type": "ready", "device", "dtype"}  or  {"type": "load_error", "message"}
  {"type": "token", "id", "text"}
  {"type": "done", "id", "finish_reason", "prompt_tokens", "completion_tokens", "timed_out"}
  {"type": "error", "id", "message", "field"?}
Generations run one at a time, in the order they came. The real stdout carries only this
protocol: libraries print to stdout now and then, so it is moved to stderr, which the
parent keeps a tail of for messages. Exit code 2: the model was refused; 1: it failed.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import traceback
from typing import Any, Callable

from tunelab.inference.child_process import line_sender


def _read_requests(work: queue.Queue, flags: dict[str, threading.Event], lock: threading.Lock) -> None:
    """Queue each generate request, set the flag of each stop; at end of input, stop all."""
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # the parent writes whole lines of JSON; anything else is not ours
        if not isinstance(message, dict):
            continue
        gen_id = str(message.get("id"))
        with lock:
            if message.get("op") == "generate":
                flags[gen_id] = threading.Event()
                work.put(message)
            elif message.get("op") == "stop" and gen_id in flags:
                flags[gen_id].set()
    with lock:
        for flag in flags.values():
            flag.set()
    work.put(None)


def serve(loaded: Any, send: Callable[[dict[str, Any]], None]) -> None:
    from tunelab.inference.generate import GenerationInputError, generate

    work: queue.Queue = queue.Queue()
    flags: dict[str, threading.Event] = {}
    lock = threading.Lock()
    threading.Thread(target=_read_requests, args=(work, flags, lock), name="requests", daemon=True).start()
    while (request := work.get()) is not None:
        gen_id = str(request.get("id"))
        with lock:
            flag = flags[gen_id]
        try:
            if flag.is_set():
                send({"type": "done", "id": gen_id, "finish_reason": "cancelled", "prompt_tokens": 0,
                      "completion_tokens": 0, "timed_out": False})
            else:
                generate(loaded, request, flag, send)
        except GenerationInputError as exc:
            send({"type": "error", "id": gen_id, "message": str(exc), "field": exc.field})
        except Exception as exc:  # noqa: BLE001 - one failed generation must not end the child
            traceback.print_exc()
            send({"type": "error", "id": gen_id, "message": f"generation failed: {type(exc).__name__}: {exc}"})
        finally:
            with lock:
                flags.pop(gen_id, None)


def main() -> int:
    # Ctrl-C in a terminal reaches the whole process group: for `tunelab chat` it means
    # "stop this answer", which the parent sends as a stop message. The parent decides
    # when this process ends (end of input, terminate; it dies with its parent).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send = line_sender(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)
    first = sys.stdin.readline()
    if not first:
        return 0
    from tunelab.inference.generate import LoadRefused, load_model

    try:
        loaded = load_model(json.loads(first))
    except LoadRefused as exc:
        send({"type": "load_error", "message": str(exc)})
        return 2
    except Exception as exc:  # noqa: BLE001 - any load failure becomes a message for the parent
        traceback.print_exc()
        send({"type": "load_error", "message": f"loading the model failed: {type(exc).__name__}: {exc}"})
        return 1
    send({"type": "ready", **loaded.describe()})
    serve(loaded, send)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Nothing is left to clean up, and tearing down torch's interpreter state takes seconds.
    os._exit(code)
