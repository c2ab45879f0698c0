"""Data preparation shared by the torch and mlx backends: raw rows in, token rows out.

`prepare(config, tokenizer, raw)` takes the data loaded by `sources.load_raw`, renders
and tokenizes every row (`tokenization.tokenize_rows`, a batch of rows per tokenizer call) and returns `PreparedData(train, eval,
format)` whose rows hold `input_ids`, `labels` (-100 where no loss is taken) and
`completion_mask`. Both backends train on exactly these tokens. The pieces are re-exported
here because this module is the interface the backends use. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunelab.worker.data import tokenizer_threads
from tunelab.worker.families.embedding.formats import EMBEDDING_FORMATS
from tunelab.worker.data.formats import DataFormatError, detect_format, image_column, to_messages, to_plain_text
from tunelab.worker.data.sources import RawData, load_raw
from tunelab.worker.data.tokenization import (
    FALLBACK_CHAT_TEMPLATE,
    IGNORE_INDEX,
    ensure_chat_template,
    tokenize_example,
    tokenize_rows,
    uses_raw_text,
)

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

__all__ = [
    "DataFormatError", "FALLBACK_CHAT_TEMPLATE", "IGNORE_INDEX", "PreparedData", "RawData",
    "detect_format", "load_raw", "prepare", "to_messages", "to_plain_text", "tokenize_example",
]
# Completion masking may leave a few rows without trained tokens (they are dropped); when
# more than this share is affected the settings are wrong, not the data.
MAX_UNLABELLED_SHARE = 0.5
TOKEN_COLUMNS = ("input_ids", "labels", "completion_mask")
# Rows per tokenizer call: enough for the fast tokenizer's threads to share out, few
# enough that a batch's token lists stay small next to the model.
TOKENIZE_BATCH_ROWS = 1000


@dataclass
class PreparedData:
    train: Any  # datasets.Dataset with TOKEN_COLUMNS (or vision_data.VISION_COLUMNS)
    eval: Any | None
    format: str
    collator: Any = None  # the batch builder the rows need, where TRL's own does not fit (image rows)
    notes: list[str] = field(default_factory=list)  # said to the user before training (e.g. rows skipped)
    # Rows as a trainer takes them: cut to max_seq_length, rows without a trained token
    # dropped, labels where they differ from the ids (`prepare` makes them so).
    trainer_ready: bool = False


def prepare(config: WorkerConfig, tokenizer: Any, raw: RawData) -> PreparedData:
    """Render and tokenize the run's data (loaded by `load_raw`; the token rows are cached
    next to its Arrow files)."""
    if image_column(raw.train.column_names):
        raise DataFormatError("model_name", f"the dataset has images (column '{image_column(raw.train.column_names)}') and "
                                            f"{config.model_name} is a text-only model; use an image-text-to-text model, or drop the image column")
    _refuse_image_parts(raw, config)
    if raw.format in EMBEDDING_FORMATS:
        raise DataFormatError("model_name", f"{raw.format} data (columns {raw.train.column_names}) trains an embedding model and "
                                            f"{config.model_name} is a generative model; point model_name at an encoder "
                                            "or a sentence-transformers model, or give instruction or chat data")
    if raw.format == "transcription":
        raise DataFormatError("model_name", f"the dataset is audio with transcripts and {config.model_name} is not a speech-to-text "
                                            "model; use a speech-to-text model (e.g. Whisper), or give text data")
    _check_masking_applies(raw.format, config)
    if not uses_raw_text(raw.format, config):
        ensure_chat_template(tokenizer)
    train = _tokenize(raw.train, raw.format, tokenizer, config, "training")
    _check_batch_fits(len(train), config)
    eval_set = _tokenize(raw.eval, raw.format, tokenizer, config, "eval") if raw.eval is not None else None
    return PreparedData(train=train, eval=eval_set, format=raw.format, trainer_ready=True)


def _refuse_image_parts(raw: RawData, config: WorkerConfig) -> None:
    """Image parts (an OpenAI `image_url` part, say) in a text-only model's data: an error
    naming the first such row and part, never a run that trains on them as text."""
    from tunelab.worker.families.vision.formats import first_image_part

    for what, rows in (("training", raw.train), ("eval", raw.eval)):
        found = first_image_part(rows) if rows is not None else None
        if found:
            raise DataFormatError("model_name", f"row {found.row} of the {what} data has an image in {found.place}, and "
                                                f"{config.model_name} is a text-only model; use an image-text-to-text "
                                                "model, or remove the image parts from the data")


def _check_batch_fits(rows: int, config: WorkerConfig) -> None:
    """A batch can never be larger than the data; say so instead of training on a
    fraction of one batch (or allocating for rows that do not exist)."""
    batch = config.batch_size
    if batch > rows:
        raise DataFormatError("batch_size", f"batch_size {batch} is larger than the {rows} training rows; "
                                            f"set batch_size to {rows} or less, or add data")


def _check_masking_applies(fmt: str, config: WorkerConfig) -> None:
    if not config.train_on_completions:
        return
    if config.training_type == "continued_pretraining":
        raise DataFormatError("train_on_completions", "continued pretraining takes the loss on every token; set train_on_completions=false")
    if fmt == "text":
        raise DataFormatError("train_on_completions", "raw text has no assistant replies to train on; set train_on_completions=false or use chat/instruction data")


def _tokenize(rows: Any, fmt: str, tokenizer: Any, config: WorkerConfig, what: str) -> Any:
    def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        columns = list(batch)
        encoded = tokenize_rows([dict(zip(columns, values)) for values in zip(*batch.values())], fmt, tokenizer, config)
        out: dict[str, list[Any]] = {name: [row[name] for row in encoded] for name in TOKEN_COLUMNS}
        out["trained_tokens"] = [sum(row["completion_mask"]) for row in encoded]
        return out

    with tokenizer_threads.all_cores():
        tokenized = rows.map(tokenize, batched=True, batch_size=TOKENIZE_BATCH_ROWS, remove_columns=rows.column_names,
                             desc=f"Tokenizing {what} data")
    counts = tokenized["trained_tokens"][:]  # a list at once: iterating the column reads it row by row (~0.7 s for 10,000)
    unlabelled = sum(1 for n in counts if n == 0)
    if counts and unlabelled > MAX_UNLABELLED_SHARE * len(counts):
        raise DataFormatError(
            "train_on_completions" if config.train_on_completions else "max_seq_length",
            f"{unlabelled} of {len(counts)} {what} rows have no tokens to learn from. "
            + (
                "With train_on_completions only assistant replies are trained: check that replies map to "
                "the 'assistant' role (role_mapping) and that max_seq_length "
                f"({config.max_seq_length}) leaves room for them after the prompt, or set train_on_completions=false"
                if config.train_on_completions
                else "The rows are empty; check the data and column_mapping"
            ),
        )
    if unlabelled:
        tokenized = tokenized.filter(lambda row: row["trained_tokens"] > 0)
    if len(tokenized) == 0:
        raise DataFormatError("dataset", f"the {what} data has no rows to train on")
    return tokenized.remove_columns("trained_tokens")
