"""Image + text data for a vision-language model: rows in, text tokens and image references out.

`prepare(config, processor, raw)` turns each row (any shape `vision_formats` reads) into
  text       the conversation rendered with the processor's chat template
  images     the row's images as `{path, bytes}` references, in placeholder order
  text_ids   the rendered text tokenized *before* the processor expands image placeholders
  loss_mask  1 on the tokens that take loss: every text token, or with
             `train_on_completions` only the assistant turns (found as in `tokenization`);
             never an image placeholder or marker (`image_token_ids`: the processor's named
             image tokens and the special tokens its chat template writes for an image)
Every form of image reference (`image_sources`: paths, bytes, hub dicts, data: URIs,
http(s) URLs downloaded once into the run's cache) becomes `{path, bytes}` here. Pixels
are never decoded here: every image is opened only far enough to check that it is an
image (a missing or unreadable one is an error naming its row, the part and the image,
before training; with `skip_bad_images` the row is dropped instead, and the count and the
first few rows and images come back as a note the worker reports), and decoded batch by
batch in `vision_collator`. Relative image paths are resolved against the folder of the
dataset file (the first of the run's data folders that holds them). In a run a server
started (`paths.reads_confined`), an image path outside the data roots is refused like a
data file there would be, and so is an http(s) URL unless the server allows them. Rows
with image parts (an OpenAI `image_url` part, say) are image rows even without an images
column (`has_images`). Torch-free apart from the collator it hands on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tunelab import paths
from tunelab.worker.data.prepare import MAX_UNLABELLED_SHARE, PreparedData, _check_batch_fits, _check_masking_applies
from tunelab.worker.data.formats import DataFormatError, image_column
# image_reference is re-exported: the audio paths read clip references the same way.
from tunelab.worker.data.image_sources import ImageRefused, ImageSources, describe, image_reference  # noqa: F401
from tunelab.worker.data.sources import RawData
from tunelab.worker.data.tokenization import assistant_spans, render
from tunelab.worker.families.vision.tokens import image_token_ids
from tunelab.worker.families.vision.formats import first_image_part, vision_messages

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

VISION_COLUMNS = ("text", "images", "text_ids", "loss_mask")
# With skip_bad_images: how many skipped (row, path) pairs a note names before "…".
SHOWN_SKIPPED = 5


def has_images(raw: RawData) -> bool:
    """Whether the run's rows hold images: an image column, or image parts in the conversations."""
    return image_column(raw.train.column_names) is not None or first_image_part(raw.train) is not None


def refuse_placeholders_without_images(raw: RawData) -> None:
    """Conversations with `<image>` placeholders but no images anywhere: the images are in a
    column tunelab did not recognise, and training on the placeholders as text would
    silently teach a vision model without its images."""
    found = first_image_part(raw.train, placeholders=True)
    if found:
        raise DataFormatError("column_mapping", f"row {found.row} of the training data has {found.what} in {found.where} "
                                                f"but the data has no images column (its columns are "
                                                f"{raw.train.column_names}); map the column that holds the images, e.g. "
                                                "column_mapping: {images: your_column}")


def undecoded(rows: Any) -> Any:
    """Hub image features hold decoded pictures by default: read them as bytes instead, so
    a row costs its compressed size until a batch needs it."""
    import datasets

    column = image_column(rows.column_names)
    feature = rows.features.get(column)
    if isinstance(feature, datasets.Image):
        return rows.cast_column(column, datasets.Image(decode=False))
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.Image):
        return rows.cast_column(column, datasets.List(datasets.Image(decode=False)))
    return rows


def data_folders(config: WorkerConfig, what: str) -> list[Path]:
    files = config.local_eval_datasets if what == "eval" else []
    files = files + list(config.local_datasets)
    folders: list[Path] = []
    for name in files:
        folder = Path(name).expanduser().resolve().parent
        if folder not in folders:
            folders.append(folder)
    return folders


def _source_field(config: WorkerConfig, what: str) -> str:
    if what == "eval" and config.local_eval_datasets:
        return "local_eval_datasets"
    return "local_datasets" if config.local_datasets else "s3" if config.s3 else "dataset"


def check_image(ref: dict[str, Any]) -> None:
    """Open an image far enough to know it is one (header and structure, no pixels)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(ref["bytes"]) if ref["bytes"] else ref["path"]) as image:
        image.verify()


def _row_features() -> Any:
    """The converted rows' columns, stated rather than inferred: a first batch of skipped
    rows (empty lists) must not fix the column types for the good rows after it."""
    import datasets

    return datasets.Features({
        "text": datasets.Value("string"),
        "images": datasets.List({"path": datasets.Value("string"), "bytes": datasets.Value("binary")}),
        "text_ids": datasets.List(datasets.Value("int64")),
        "loss_mask": datasets.List(datasets.Value("int64")),
        "bad_image": datasets.Value("string"),
    })


def drop_bad_rows(converted: Any, column: str, field: str, what: str, notes: list[str], *, has: str, whose: str,
                  setting: str, kind: str) -> Any:
    """`converted` without the rows a skip setting marked bad in `column` (and without that
    column), the skipped rows reported in `notes`; a split whose every row is bad is an error
    on `field`. `has` says what each bad row has ("an image that cannot be read"), `whose`
    what was wrong, `kind` which paths to check ("image"). Shared by images and audio."""
    bad = [(index, reason) for index, reason in enumerate(converted[column]) if reason is not None]
    if bad:
        if len(bad) == len(converted):
            raise DataFormatError(field, f"every one of the {len(bad)} {what} rows has {has} "
                                         f"({setting} skipped them all), e.g. row {bad[0][0]}: {bad[0][1]}; "
                                         f"check the {kind} paths (relative paths are relative to the dataset file)")
        notes.append(skipped_note(bad, len(converted), what, whose, setting))
        converted = converted.filter(lambda reason: reason is None, input_columns=column)
    return converted.remove_columns(column)


def skipped_note(bad: list[tuple[int, str]], total: int, what: str, whose: str, setting: str) -> str:
    """The note a run reports for the rows a skip setting dropped: the count and the first
    few rows with what is wrong (`whose`: "image is missing, ..."), shared by images and audio."""
    shown = ", ".join(f"row {index} ({reason})" for index, reason in bad[:SHOWN_SKIPPED])
    more = f" and {len(bad) - SHOWN_SKIPPED} more" if len(bad) > SHOWN_SKIPPED else ""
    return f"Skipped {len(bad)} of {total} {what} rows whose {whose} ({setting}): {shown}{more}"


def tokens_and_loss_mask(processor: Any, messages: list[dict[str, Any]], completions: bool,
                         media_ids: set[int]) -> tuple[str, list[int], list[int]]:
    """A row's messages rendered and tokenized before the processor expands its media tokens,
    with the loss mask: every text token, or with `completions` only the assistant turns;
    never a media token (`media_ids`). Shared by the image and audio chat paths."""
    if completions:
        text, spans = assistant_spans(processor, messages)
    else:
        text, spans = render(processor, messages), None
    encoded = processor.tokenizer(text, add_special_tokens=False, return_offsets_mapping=completions)
    ids = list(encoded["input_ids"])
    if spans is None:
        mask = [1] * len(ids)
    else:
        mask = [1 if any(start <= first < end for start, end in spans) else 0 for first, _ in encoded["offset_mapping"]]
    mask = [0 if token in media_ids else keep for token, keep in zip(ids, mask)]
    return text, ids, mask


def labelled_rows(converted: Any, what: str, completions: bool) -> Any:
    """The converted rows that have a token to learn from; too many without is an error."""
    counts = [sum(m) for m in converted["loss_mask"]]
    unlabelled = sum(1 for n in counts if n == 0)
    if counts and unlabelled > MAX_UNLABELLED_SHARE * len(counts):
        raise DataFormatError("train_on_completions" if completions else "dataset",
                              f"{unlabelled} of {len(counts)} {what} rows have no text to learn from; "
                              + ("check that replies map to the 'assistant' role (role_mapping)" if completions else "check the data and column_mapping"))
    if unlabelled:
        converted = converted.filter(lambda row: sum(row["loss_mask"]) > 0)
    return converted


def prepare_media_rows(config: WorkerConfig, raw: RawData, rows_named: str, media: str,
                       rows: Callable[[Any, str, list[str]], Any], make_collator: Callable[[], Any]) -> PreparedData:
    """Media chat rows (image-text, audio chat) checked and tokenized by `rows(rows, what,
    notes)`, with the collator `make_collator` builds, checked on the first training rows.
    The settings such rows cannot train with are refused first, with the fix
    (`rows_named`: "image-text" / "audio chat"; `media`: "image" / "audio")."""
    if config.packing:
        raise DataFormatError("packing", f"{rows_named} rows cannot be packed (each row's {media} tokens must stay with it); set packing=false")
    if config.training_type == "continued_pretraining":
        raise DataFormatError("training_type", f"continued pretraining reads raw text; {rows_named} data trains with training_type=lora, qlora or full")
    _check_masking_applies(raw.format, config)
    notes: list[str] = []
    train = rows(raw.train, "training", notes)
    _check_batch_fits(len(train), config)
    eval_set = rows(raw.eval, "eval", notes) if raw.eval is not None else None
    collator = make_collator()
    collator.check_first(train)
    return PreparedData(train=train, eval=eval_set, format=raw.format, collator=collator, notes=notes)


def run_image_sources(config: WorkerConfig, what: str) -> ImageSources:
    """How this run's `what` data ("training" / "eval") resolves its image references:
    relative paths against its data folders, downloads into its own folder's cache."""
    output_dir = config.output_dir
    return ImageSources(data_folders(config, what), _source_field(config, what),
                        paths.run_images_cache(output_dir) if output_dir else None)


def _rows(rows: Any, fmt: str, processor: Any, config: WorkerConfig, what: str, notes: list[str]) -> Any:
    sources = run_image_sources(config, what)
    field = sources.field
    completions = config.train_on_completions
    skip_bad = config.skip_bad_images
    image_ids = image_token_ids(processor)

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        try:
            messages, refs, places = vision_messages(row, fmt, config)
        except DataFormatError as exc:
            raise DataFormatError(exc.field, f"row {index} of the {what} data: {exc.message}") from exc
        images = []
        for ref, place in zip(refs, places):
            image = None
            try:
                image = sources.resolve(ref)
                check_image(image)
            except (paths.PathNotAllowed, ImageRefused) as exc:
                # A refusal, not bad data: skip_bad_images never turns it into a skip.
                raise DataFormatError(field, f"row {index} of the {what} data: image in {place}: {exc}") from exc
            except Exception as exc:  # missing file, not an image, truncated header, too large, unreachable
                shown = (image or {}).get("path") or describe(ref)
                if skip_bad:
                    return {"text": "", "images": [], "text_ids": [], "loss_mask": [], "bad_image": str(shown)}
                raise DataFormatError(field, f"row {index} of the {what} data: image {shown} in {place} cannot be read ({exc}); "
                                             "fix or remove the row, or correct the path (relative paths are relative to the dataset file), "
                                             "or set skip_bad_images=true to skip such rows") from exc
            images.append(image)
        text, ids, mask = tokens_and_loss_mask(processor, messages, completions, image_ids)
        return {"text": text, "images": images, "text_ids": ids, "loss_mask": mask, "bad_image": None}

    # Never from the cache: a resumed run must find a deleted image now, not halfway through.
    converted = undecoded(rows).map(convert, with_indices=True, remove_columns=rows.column_names, features=_row_features(),
                                    load_from_cache_file=False, desc=f"Checking {what} images")
    converted = drop_bad_rows(converted, "bad_image", field, what, notes, has="an image that cannot be read",
                              whose="image is missing, unreadable or not an image", setting="skip_bad_images", kind="image")
    return labelled_rows(converted, what, completions)


def prepare(config: WorkerConfig, processor: Any, raw: RawData) -> PreparedData:
    """Image-text rows checked and tokenized, with the collator that decodes their images."""
    from tunelab.worker.families.vision.collator import VisionCollator

    return prepare_media_rows(
        config, raw, "image-text", "image",
        lambda rows, what, notes: _rows(rows, raw.format, processor, config, what, notes),
        lambda: VisionCollator(processor, config.max_seq_length, config.vision_image_size))
