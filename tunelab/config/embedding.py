"""The run settings that only embedding models read, and their checks (called by config/run_config.py).

`embedding_loss` names the loss (or `auto`: chosen per data shape in the worker, see
`worker/families/embedding/loss.py`); each loss fits some data shapes only, and when the run's
`format` names a shape the pair is checked here, before any run exists. `matryoshka_dims`
trains the leading dimensions of each embedding to work on their own (Matryoshka
representation learning); the list is kept largest first. Torch-free, like config/run_config.py.
"""

from __future__ import annotations

from typing import Literal

EmbeddingLoss = Literal["auto", "mnrl", "cached_mnrl", "triplet", "cosent", "angle", "cosine", "contrastive", "online_contrastive"]
# Which data shapes (embedding_formats.EMBEDDING_FORMATS) each loss trains on.
LOSS_FORMATS: dict[str, tuple[str, ...]] = {
    "mnrl": ("pairs", "triplets"),
    "cached_mnrl": ("pairs", "triplets"),
    "triplet": ("triplets",),
    "cosent": ("scored_pairs", "labelled_pairs"),
    "angle": ("scored_pairs", "labelled_pairs"),
    "cosine": ("scored_pairs", "labelled_pairs"),
    "contrastive": ("labelled_pairs",),
    "online_contrastive": ("labelled_pairs",),
}
EMBEDDING_LOSS_HELP = ("auto | mnrl | cached_mnrl | triplet | cosent | angle | cosine | contrastive | online_contrastive. "
                       "Embedding models only. auto: in-batch negatives ranking (MultipleNegativesRankingLoss; its cached "
                       "variant from batch_size 64) for pairs and triplets, CoSENT for scored pairs, online contrastive "
                       "for labelled query/document pairs.")
MATRYOSHKA_HELP = ("Embedding models only: also train these leading dimensions of each embedding to work alone "
                   "(Matryoshka), e.g. [256, 128, 64]; each at most the model's embedding size.")
MAX_MATRYOSHKA_DIM = 65536


def loss_fits(loss: str, fmt: str) -> bool:
    return loss == "auto" or fmt in LOSS_FORMATS[loss]


def loss_format_error(loss: str, fmt: str) -> str:
    fitting = [name for name, shapes in LOSS_FORMATS.items() if fmt in shapes]
    return (f"embedding_loss={loss} trains on {' or '.join(LOSS_FORMATS[loss])} data and the data is {fmt}; "
            f"use embedding_loss=auto or one of {fitting}")


def normalise_matryoshka_dims(dims: list[int] | None) -> list[int] | None:
    """Largest first, each dimension once; raises ValueError naming the bad entry."""
    if not dims:
        return None
    bad = [d for d in dims if not 1 <= d <= MAX_MATRYOSHKA_DIM]
    if bad:
        raise ValueError(f"has {bad[0]}, which is no embedding size; give dimensions from 1 to {MAX_MATRYOSHKA_DIM}, e.g. [256, 128, 64]")
    if len(set(dims)) != len(dims):
        raise ValueError(f"lists a dimension twice ({sorted(dims, reverse=True)}); give each once")
    return sorted(dims, reverse=True)
