"""The model side of the inference child: load a run's weights, and stream one answer.

A text run loads as a causal LM with its tokenizer; a vision-language, audio chat or
speech-to-text run with its processor and its family's auto class (`media_models`), and
a chat with images or clips goes through that processor as its training rows did.

An adapter run loads its base once with the PEFT adapter on top; its base answers come
from the same weights with the adapter switched off (`disable_adapter()`), so compare
costs no second copy. A full run loads its own folder, and for base answers its base
model as well, on the first request for one. Every answer is bounded: max_new_tokens
(clamped to the model's context), the time cap (`max_time`), and a stop flag checked at
every token (`FlagStop`), which the parent sets to end it early. The text goes out from
inside `generate` as it is made, a few tokens per message when they come faster than
SEND_EVERY_S (`PieceSender`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from tunelab.inference.child_errors import GenerationInputError, LoadRefused

# Streaming: tokens that come closer together than this travel as one message (PieceSender).
# 20 ms is far below what a reader of a streamed answer notices.
SEND_EVERY_S = 0.02


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    kind: str
    device: str
    base_model: str
    trust_remote_code: bool
    base: Any = field(default=None)  # a full run's base model, once a base answer was asked for
    processor: Any = None            # a media family's processor (its tokenizer is `tokenizer`)
    family: Any = None               # media_models.MediaFamily, None for a text model
    image_size: int = 512            # a vision run's vision_image_size

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "dtype": str(self.model.dtype).removeprefix("torch."), "kind": self.kind}

    def model_for(self, adapter: bool) -> tuple[Any, contextlib.AbstractContextManager]:
        """The model to generate with and the context to do it in: the fine-tune, or its base."""
        if adapter:
            return self.model, contextlib.nullcontext()
        if self.kind == "adapter":
            return self.model, self.model.disable_adapter()
        if self.base is None:
            auto_class = self.family.model_class() if self.family is not None else None
            self.base = _pretrained(self.base_model, self.trust_remote_code, self.device, auto_class)
        return self.base, contextlib.nullcontext()


def _quiet_libraries() -> None:
    from tunelab.worker.bnb_import import import_bitsandbytes

    import_bitsandbytes()  # before peft imports it (see bnb_import.py)
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _pretrained(source: str, remote_code: bool, device: str, auto_class: Any = None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = (auto_class or AutoModelForCausalLM).from_pretrained(source, dtype="auto", trust_remote_code=remote_code)
    if device == "cpu" and model.dtype in (torch.float16, torch.bfloat16):
        model = model.float()  # half precision on a CPU is slow, and some kernels lack it
    return model.to(device).eval()


def load_model(request: dict[str, Any]) -> LoadedModel:
    _quiet_libraries()
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from tunelab.inference import media_models
    from tunelab.worker.context import RunSettingError
    from tunelab.worker.data.tokenization import ensure_chat_template

    remote_code = bool(request["trust_remote_code"])
    adapter = request["kind"] == "adapter"
    _check_remote_code(request)
    config = AutoConfig.from_pretrained(request["base_model"] if adapter else request["weights"], trust_remote_code=remote_code)
    family = media_models.family_of(config)
    processor = None
    if family is not None:
        try:
            processor = media_models.load_processor(family, request)
        except RunSettingError as exc:
            raise LoadRefused(f"run {request['run_id']}: {exc}") from None
    auto_class = family.model_class() if family is not None else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if adapter:
        from peft import PeftModel

        base = _pretrained(request["base_model"], remote_code, device, auto_class)
        model = PeftModel.from_pretrained(base, request["weights"]).eval()
    else:
        model = _pretrained(request["weights"], remote_code, device, auto_class)
    if processor is not None:
        tokenizer = processor.tokenizer
    else:
        # The run saved its tokenizer (with the chat template it trained with) beside the weights.
        tokenizer = AutoTokenizer.from_pretrained(request["weights"], trust_remote_code=remote_code)
        ensure_chat_template(tokenizer)
    return LoadedModel(model=model, tokenizer=tokenizer, kind=request["kind"], device=device,
                       base_model=request["base_model"], trust_remote_code=remote_code, processor=processor,
                       family=family, image_size=int(request.get("image_size") or 512))


def _check_remote_code(request: dict[str, Any]) -> None:
    """A run approved by fingerprint loads only the approved code, as its training did."""
    from tunelab.remote_code.check import FIELD, RemoteCodeRefused, check_run_model

    config = {"trust_remote_code": request["trust_remote_code"], FIELD: request.get(FIELD), "model_name": request["base_model"]}
    try:
        check_run_model(config, request["weights"])
    except RemoteCodeRefused as exc:
        raise LoadRefused(f"{exc.field}: {exc}") from None


class StopStrings:
    """Cuts the answer at the first stop string. Text that could still become one is held
    back until it cannot, so no part of a stop string is ever sent."""

    def __init__(self, stops: list[str] | tuple[str, ...]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to send now, whether a stop string was reached)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        found = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if found:
            out, self.pending = self.pending[:min(found)], ""
            return out, True
        keep = max((n for s in self.stops for n in range(1, len(s)) if self.pending.endswith(s[:n])), default=0)
        cut = len(self.pending) - keep
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


def _encode(loaded: LoadedModel, request: dict[str, Any]) -> dict[str, Any]:
    """The model's inputs: at least input_ids, and a media model's pixel values or audio features."""
    from tunelab.worker.data.formats import DataFormatError
    from tunelab.worker.data.tokenization import render

    tokenizer = loaded.tokenizer
    messages = request.get("messages")
    if messages is not None and loaded.family is not None and loaded.family.media is not None:
        from tunelab.inference.media_models import encode

        return encode(loaded.processor, loaded.family, loaded.image_size, messages)
    if messages is not None:
        if any(isinstance(m.get("content"), list) for m in messages):
            raise GenerationInputError("messages", "this model reads text only; send each message's content as text")
        try:
            text = render(tokenizer, messages, add_generation_prompt=True)
        except DataFormatError as exc:
            raise GenerationInputError("messages", exc.message) from None
        # The template writes every special token itself, as in training.
        return {"input_ids": tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]}
    return {"input_ids": tokenizer(str(request.get("prompt") or ""), add_special_tokens=True, return_tensors="pt")["input_ids"]}


def _on_device(inputs: dict[str, Any], model: Any, device: str) -> dict[str, Any]:
    """The inputs on the model's device; pixel values and features in the model's float type."""
    import torch

    return {key: (value.to(device, model.dtype) if torch.is_floating_point(value) else value.to(device))
            for key, value in inputs.items()}


def _eos_ids(loaded: LoadedModel, model: Any) -> set[int]:
    ids = getattr(model.generation_config, "eos_token_id", None)
    found = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if loaded.tokenizer.eos_token_id is not None:
        found.add(loaded.tokenizer.eos_token_id)
    return found


class PieceSender:
    """The answer's text as messages: the first piece at once, then a piece that comes
    within `every_s` of the last message waits to go with the next one. A model that
    outruns the stream sends a few tokens per message, so the pipe, the server and the
    client do their per-message work once for several tokens; a model slower than `every_s`
    a token has each token sent as it comes. `flush` sends what waits (the answer's end)."""

    def __init__(self, send_text: Callable[[str], None], every_s: float = SEND_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self._send_text, self._every_s, self._clock = send_text, every_s, clock
        self._held: list[str] = []
        self._last_sent: float | None = None

    def add(self, text: str, now: bool = False) -> None:
        """Take `text` (the streamer also reports "" while a word is unfinished); `now`
        sends it without waiting."""
        if text:
            self._held.append(text)
        if now or self._last_sent is None or self._clock() - self._last_sent >= self._every_s:
            self.flush()

    def flush(self) -> None:
        if self._held:
            self._send_text("".join(self._held))
            self._held.clear()
            self._last_sent = self._clock()


def generate(loaded: LoadedModel, request: dict[str, Any], stop: threading.Event,
             send: Callable[[dict[str, Any]], None]) -> None:
    """Stream one answer as `token` messages, then one `done` message."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextStreamer

    class FlagStop(StoppingCriteria):
        """Ends generation at the next token once the stop flag (or a stop string) is set."""

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            ended = stop.is_set() or halted.is_set()
            return torch.full((input_ids.shape[0],), ended, dtype=torch.bool, device=input_ids.device)

    gen_id = request["id"]
    sampling = request.get("sampling") or {}
    inputs = _encode(loaded, request)
    input_ids = inputs["input_ids"]
    prompt_tokens = int(input_ids.shape[1])
    if prompt_tokens == 0:
        raise GenerationInputError("prompt" if request.get("messages") is None else "messages", "the prompt is empty; send some text")
    model, context = loaded.model_for(bool(request.get("adapter", True)))
    # A vision-language model names its language model's window in its text config.
    window = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    max_new = int(sampling.get("max_new_tokens", 256))
    if window:
        if prompt_tokens >= window:
            raise GenerationInputError("messages" if request.get("messages") is not None else "prompt",
                                       f"the prompt is {prompt_tokens} tokens and the model reads at most {window}; shorten it")
        max_new = min(max_new, window - prompt_tokens)
    max_time = float(request.get("max_time_s") or 300.0)
    halted = threading.Event()
    stops = StopStrings(sampling.get("stop") or ())
    pieces = PieceSender(lambda text: send({"type": "token", "id": gen_id, "text": text}))

    class Relay(TextStreamer):
        """Sends the answer's text from inside `generate`, on the thread that runs it. A
        second thread woken per token (TextIteratorStreamer) cost the demo model ~18% of its
        tokens/s in thread hand-offs; the stop flag needs no thread, it is read at each token."""

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if halted.is_set():
                return  # past a stop string: the rest is dropped while generation winds down
            out, reached = stops.feed(text) if text else ("", False)
            pieces.add(out, now=reached or stream_end)
            if reached:
                halted.set()

    inputs.setdefault("attention_mask", torch.ones_like(input_ids))
    kwargs: dict[str, Any] = {
        **_on_device(inputs, model, loaded.device),
        "streamer": Relay(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True), "max_new_tokens": max_new,
        "min_new_tokens": min(int(sampling.get("min_new_tokens", 0)), max_new),
        "max_time": max_time, "stopping_criteria": StoppingCriteriaList([FlagStop()]), "use_cache": True,
        "pad_token_id": loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.tokenizer.eos_token_id,
    }
    temperature = float(sampling.get("temperature", 0.0))
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_p=float(sampling.get("top_p", 1.0)), top_k=0)
    else:
        kwargs.update(do_sample=False)
    if sampling.get("seed") is not None:
        torch.manual_seed(int(sampling["seed"]))
    started = time.monotonic()
    with context, torch.inference_mode():
        made = model.generate(**kwargs)
    if not halted.is_set() and (rest := stops.flush()):
        pieces.add(rest)
    pieces.flush()
    new_ids = made[0][prompt_tokens:].tolist()
    timed_out = time.monotonic() - started >= max_time
    if halted.is_set() or (new_ids and new_ids[-1] in _eos_ids(loaded, model)):
        reason = "stop"
    elif len(new_ids) >= max_new or timed_out:
        reason = "length"
    elif stop.is_set():
        reason = "cancelled"
    else:
        reason = "stop"
    send({"type": "done", "id": gen_id, "finish_reason": reason, "prompt_tokens": prompt_tokens,
          "completion_tokens": len(new_ids), "timed_out": timed_out})
