"""Which sentence-transformers loss an embedding run trains with, and the batches it needs.

`choose_loss(fmt, config)`: `embedding_loss` when set, else by data shape — in-batch
negatives ranking (MultipleNegativesRankingLoss) for pairs and triplets, its cached
variant (GradCache: the same loss in mini-batches, so memory stays flat) once the
batch reaches `CACHED_MNRL_MIN_BATCH` rows, CoSENT for scored pairs, online
contrastive for labelled pairs. An in-batch-negatives loss uses every other row of the
batch as a negative, so its batches must hold no duplicate texts (sentence-transformers'
no-duplicates sampler) and at least two rows. `matryoshka_dims` wraps the loss in
MatryoshkaLoss. Names and checks are torch-free; `build_loss` imports the library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.config.embedding import LOSS_FORMATS, loss_format_error
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

AUTO_LOSS = {"pairs": "mnrl", "triplets": "mnrl", "scored_pairs": "cosent", "labelled_pairs": "online_contrastive"}
IN_BATCH_LOSSES = ("mnrl", "cached_mnrl")
# From this many rows per batch the cached variant computes the same loss in mini-batches
# of `CACHED_MINI_BATCH`, so the batch (the negatives) grows without the activations.
CACHED_MNRL_MIN_BATCH = 64
CACHED_MINI_BATCH = 32
LOSS_CLASSES = {
    "mnrl": "MultipleNegativesRankingLoss", "cached_mnrl": "CachedMultipleNegativesRankingLoss",
    "triplet": "TripletLoss", "cosent": "CoSENTLoss", "angle": "AnglELoss", "cosine": "CosineSimilarityLoss",
    "contrastive": "ContrastiveLoss", "online_contrastive": "OnlineContrastiveLoss",
}


def choose_loss(fmt: str, config: WorkerConfig) -> str:
    """The loss name for data of shape `fmt` (raises when a chosen loss does not fit it)."""
    chosen = config.embedding_loss
    if chosen == "auto":
        chosen = AUTO_LOSS[fmt]
        if chosen == "mnrl" and config.batch_size >= CACHED_MNRL_MIN_BATCH:
            chosen = "cached_mnrl"
    elif fmt not in LOSS_FORMATS[chosen]:
        raise RunSettingError("embedding_loss", loss_format_error(chosen, fmt))
    return chosen


def uses_in_batch_negatives(loss: str) -> bool:
    return loss in IN_BATCH_LOSSES


def check_batch(loss: str, config: WorkerConfig, train_rows: int) -> None:
    """A batch the loss can learn from, and no larger than the data."""
    batch = config.batch_size
    if batch > train_rows:
        raise RunSettingError("batch_size", f"batch_size {batch} is larger than the {train_rows} training rows; "
                                            f"set batch_size to {train_rows} or less, or add data")
    if uses_in_batch_negatives(loss) and batch < 2:
        raise RunSettingError("batch_size", f"{LOSS_CLASSES[loss]} takes its negatives from the other rows of a batch, so "
                                            f"batch_size (the per_device_train_batch_size) must be at least 2, and larger "
                                            f"learns better (32 to 128 is usual); batch_size is {batch}")


def check_matryoshka(dims: list[int] | None, embedding_size: int) -> None:
    too_wide = [d for d in dims or [] if d > embedding_size]
    if too_wide:
        raise RunSettingError("matryoshka_dims", f"{too_wide} exceed the model's embedding size {embedding_size}; "
                                                 f"give dimensions of at most {embedding_size}")


def build_loss(loss: str, model: Any, config: WorkerConfig) -> Any:
    from sentence_transformers.sentence_transformer import losses

    kwargs = {"mini_batch_size": CACHED_MINI_BATCH} if loss == "cached_mnrl" else {}
    built = getattr(losses, LOSS_CLASSES[loss])(model, **kwargs)
    dims = config.matryoshka_dims
    if dims:
        check_matryoshka(dims, model.get_embedding_dimension())
        built = losses.MatryoshkaLoss(model, built, matryoshka_dims=list(dims))
    return built
