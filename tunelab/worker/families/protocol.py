"""The training side's contract: what a model family supplies to the torch backend.

The backend (`worker/backends/torch_backend.py`) runs one sequence of stages for every
run and asks the family only these members, in this order:
  prefetches_data  whether its rows need only the tokenizer, so they may be prepared on a
                   thread while the model loads; such a family is a `PrefetchingFamily`
  load             the model and its processing class (tokenizer, or processor holding one)
  prepare          the raw rows (`data.sources.RawData`) as the rows its trainer takes
  modality         what the run trains on (events.MODALITIES), told from those rows
  targets          the layers an adapter trains (None: the training path's own default)
  wrap             the model ready to train: an adapter on `targets`, or full fine-tuning
  build_trainer    the trainer, with the run's callbacks
  save_final       the finished model and its processing class in `output_dir`
and `name`, which names the family in the run's setup message. An objective other than
sft (`worker/methods/`) wraps a family and is itself a `TrainingFamily`.

A family satisfies the Protocol by having every member (checked structurally: families
do not inherit from it, so a missing member fails `isinstance` and
tests/worker/test_family_protocol.py). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    processing: Any  # the tokenizer, or the processor that holds it: what the trainer gets and what is saved


@runtime_checkable
class TrainingFamily(Protocol):
    name: str
    prefetches_data: bool

    def load(self, config: WorkerConfig, device: Any) -> Loaded: ...

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> Any: ...

    def modality(self, raw: Any) -> str: ...

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None: ...

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any: ...

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any: ...

    def save_final(self, trainer: Any, loaded: Loaded, output_dir: Any) -> None: ...


@runtime_checkable
class PrefetchingFamily(TrainingFamily, Protocol):
    """A family whose `prefetches_data` is true: the backend loads its tokenizer first and
    prepares the rows while `load` loads the model (reusing that tokenizer)."""

    def load_tokenizer(self, config: WorkerConfig) -> Any: ...
