"""What tunelab knows about one model family, in one frozen record, and what detection reads.

A `FamilySpec` is the whole answer to "which family, and so what?" for every part of the
house that is not the family's own training code: the parent's start checks, the mlx
backend's refusal, export and inference (which class loads the model, whether llama.cpp
converts it), the run's record (its modality), the page (what a run of it can do) and the
demo list. The training side lives in `tunelab/worker/families/<name>/`.

`ModelFiles` is what a caller could read of a model: its config.json as on disk, and where
the caller is a child that loaded it through transformers, that config object too (some
tests read transformers' own mappings, which a raw config.json cannot answer). The
tokenizer.json and the sentence-transformers files are looked up only when a test asks,
through the caller's own lookup (a local folder, the hub cache, or the hub).
Torch-free: nothing here imports torch, transformers or mlx at module level, and the tests
that read transformers' mappings import them only when a child asks with a loaded config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

BACKENDS = ("torch", "mlx")


def _nothing() -> None:
    return None


def _no() -> bool:
    return False


@dataclass(frozen=True)
class ModelFiles:
    """A model's own files, as far as the caller reads them (detection never reads a name)."""
    config: Mapping[str, Any] = field(default_factory=dict)  # config.json as on disk ({} when unread)
    # True where the caller (a child) read the config through transformers: `model_config`
    # is that object, or None where it did not load (then no transformers test passes).
    transformers: bool = False
    model_config: Any = None
    tokenizer_json: Callable[[], str | Path | None] = _nothing  # the tokenizer.json to read, or None
    sentence_transformers: Callable[[], bool] = _no  # whether sentence-transformers' own files are there


@dataclass(frozen=True)
class FamilySpec:
    name: str                   # the family (worker/families/<name>/, the registries' key)
    modality: str               # what its runs train on, as events.MODALITIES and the page name it
    words: str                  # how a message names one of its models: "a vision-language model"
    matches: Callable[[ModelFiles], bool]  # told from the model's own files (see each family's module)
    auto_class: str             # the transformers class export and inference load it with
    backends: tuple[str, ...] = BACKENDS  # the backends that train it
    refusal: str = ""           # after the model's name, for the backends that do not ("is a ...; use backend=torch")
    gguf: bool = True           # whether llama.cpp's converter makes a GGUF llama.cpp runs from it
    serves: str = "chat"        # chat, speak (audio out), transcribe (evaluated, not chatted with) or embed
    media: str | None = None    # the chat part it reads besides text: image or audio
    chat_refusal: str = ""      # why chat refuses its runs ({run_id} filled in); empty where it chats
    evaluates: bool = True      # whether `tunelab eval` measures it (text answers or transcripts)
    page_no_chat: str = ""      # the page's note in place of Chat
    page_no_eval: str = ""      # the page's note in place of Evaluate
    demo: str | None = None     # how `tunelab demo` names its demo (--modality, or --tts-family for tts)
    demo_words: str = ""        # what --tts-family's help says its demo model is (the families that option chooses between)
    # The tunelab.demos module whose demo_run_config(steps, backend, method) builds that demo (its
    # DEMO_STEPS, where it has one, the default --steps; its print_demo_evals(outcome, console),
    # where it has one, the figures after): named, not imported, so `tunelab demo` loads only its own.
    demo_builder: str | None = None
    # The module whose speak(request, send) speaks with it in the speak child, for a family
    # that speaks its own way with the codec inside its weights: named, not imported, so the
    # server never loads it. None: Orpheus's way, through the codec/ saved beside the weights.
    speaker: str | None = None
    export_note: str = ""       # a README line its export adds (how to run a model whose codec is inside it)
    # The worker module of a family whose model the inference and eval children read through
    # its processor: load_processor(config) loads the one a run saved, eval_rows(config,
    # processor, model, raw) prepares eval rows as training does. Named, not imported (the
    # children import it). None: a text model, read through its tokenizer.
    processor: str | None = None
    frozen_tower: str | None = None  # the config.json sub-config loaded but not trained (memory estimate)
    settings: tuple[str, ...] = ()   # the RunConfig fields only this family reads
    build: str = ""             # how its model is built, said beside its model type where a message names it

    def trains_with(self, backend: str) -> bool:
        return backend in self.backends

    def backend_refusal(self, model_name: str, backend: str) -> str | None:
        """Why `backend` cannot train this family's model `model_name`; None when it can."""
        return None if self.trains_with(backend) else f"{model_name} {self.refusal}"

