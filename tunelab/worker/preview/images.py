"""The dataset preview of image-text data (run inside `preview_child`, never in the server).

Rows are read as training reads them (`vision_formats.vision_messages`) and rendered with
the model's processor chat template where a model is given, so the image placeholders
show where the model will see each image. The preview adds what image data needs: the
number of images in the whole dataset (counted from the Arrow column, without reading
an image), and for the rows shown each image's size and a small JPEG thumbnail — or the
reason it cannot be read. The preview serves HTTP, so a path outside the folders tunelab
may read is refused (`paths.check_readable`), never opened. It also counts the rows
training would refuse (or skip, with `skip_bad_images`) for an image that is missing,
unreadable, not an image or outside those folders: every row's images are checked as
training checks them (header and structure, no pixels), over the first
`MAX_CHECKED_ROWS` rows so a huge dataset still previews quickly. Images inside chat parts
(`data:` URIs included) preview like any other; an http(s) image is never fetched by the
preview: it shows why (the server's refusal, or that the run downloads it) and counts as
neither good nor bad.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

from tunelab import paths
from tunelab.worker.preview.limits import COLUMN_CHARS, ROW_CHARS, TOTAL_CHARS, short_messages, truncate

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

THUMBNAIL_SIDE = 96
MAX_THUMBNAILS = 24  # per preview: enough to see the data, small enough to stay well under the answer cap
# Rows whose images the bad-image count checks: a header read each (~0.1 ms for a small
# local file), so a few seconds at most before the preview answers.
MAX_CHECKED_ROWS = 5_000


def image_count(data: Any, column: str) -> int:
    """How many images the column holds over all rows, read from Arrow's list lengths."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = data.data.column(column)
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        return int(pc.sum(pc.list_value_length(values)).as_py() or 0)
    return len(values) - values.null_count


def _sources(config: WorkerConfig) -> Any:
    """How the preview resolves image references: as training does, with every path checked
    against the data roots (the preview serves HTTP) and no URL fetched (no run cache)."""
    from tunelab.worker.data.image_sources import ImageSources
    from tunelab.worker.families.vision.data import data_folders

    return ImageSources(data_folders(config, "training"), "local_datasets" if config.local_datasets else "dataset",
                        None, confined=True)


def _thumbnail(ref: Any, sources: Any) -> dict[str, Any]:
    from PIL import Image

    from tunelab.worker.data.image_sources import ImageRefused, describe

    shown = describe(ref)
    try:
        image = sources.resolve(ref)
        with Image.open(io.BytesIO(image["bytes"]) if image["bytes"] else image["path"]) as opened:
            width, height = opened.size
            small = opened.convert("RGB")
            small.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
        encoded = io.BytesIO()
        small.save(encoded, format="JPEG", quality=80)
    except (paths.PathNotAllowed, ImageRefused) as exc:
        return {"name": truncate(str(shown), COLUMN_CHARS), "error": str(exc)}
    except Exception as exc:  # missing, not an image, truncated: shown, as training would refuse it
        return {"name": truncate(str(shown), COLUMN_CHARS), "error": f"cannot be read ({type(exc).__name__}: {exc})"}
    return {"name": truncate(str(shown), COLUMN_CHARS), "width": width, "height": height,
            "thumbnail": "data:image/jpeg;base64," + base64.b64encode(encoded.getvalue()).decode()}


def bad_image_rows(data: Any, fmt: str, config: WorkerConfig, sources: Any) -> tuple[int, int, int]:
    """(rows with an image training would not take, rows checked, images in them) over the
    first MAX_CHECKED_ROWS rows. Rows whose shape is wrong are left to the format's own
    error; an http(s) image is not fetched here, so it counts as neither good nor bad."""
    from tunelab.worker.data.formats import DataFormatError
    from tunelab.worker.data.image_sources import is_url
    from tunelab.worker.families.vision.data import check_image
    from tunelab.worker.families.vision.formats import vision_messages

    checked = data.select(range(min(len(data), MAX_CHECKED_ROWS)))
    bad = images = 0
    for row in checked:
        try:
            _, refs, _ = vision_messages(row, fmt, config)
        except DataFormatError:
            continue
        images += len(refs)
        try:
            for ref in refs:
                if not is_url(ref):
                    check_image(sources.resolve(ref))
        except Exception:  # missing, unreadable, not an image, or refused: what training would not take
            bad += 1
    return bad, len(checked), images


def _load_processor(name: str, config: WorkerConfig) -> tuple[Any | None, str]:
    try:
        from tunelab.worker.families.vision.model import load_processor

        return load_processor(config.model_copy(update={"model_name": name})), ""
    except Exception as exc:  # any loader failure only downgrades the preview
        return None, f"the processor of {name} could not be loaded ({type(exc).__name__}); rows are shown without its chat template"


def _as_text(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": "".join("<image>" if p["type"] == "image" else p["text"] for p in m["content"])}
            for m in messages]


def build_image_preview(config: WorkerConfig, rows: int, model_name: str | None, raw: Any, column: str | None) -> dict[str, Any]:
    """The preview of image rows; `column` is the image column, None where the images sit
    inside the conversations' parts (then the count covers the rows checked)."""
    from tunelab.worker.data.tokenization import render
    from tunelab.worker.families.vision.data import undecoded
    from tunelab.worker.families.vision.formats import vision_messages

    data = undecoded(raw.train)
    processor, note = _load_processor(model_name, config) if model_name else (None, "")
    sources = _sources(config)
    shown, budget, thumbnails = [], TOTAL_CHARS, 0
    for index in range(min(rows, len(data))):
        if budget <= 0:
            break
        messages, refs, _ = vision_messages(data[index], raw.format, config)
        text = render(processor, messages) if processor is not None else "".join(
            f"<|{m['role']}|>\n{m['content']}\n" for m in _as_text(messages))
        text = truncate(text, min(ROW_CHARS, budget))
        budget -= len(text)
        images = []
        for ref in refs:
            if thumbnails >= MAX_THUMBNAILS:
                break
            images.append(_thumbnail(ref, sources))
            thumbnails += 1
        shown.append({"index": index, "text": text, "messages": short_messages(_as_text(messages)), "images": images})
    bad, checked, images_checked = bad_image_rows(data, raw.format, config, sources)
    return {
        "format": raw.format,
        "columns": [truncate(str(name), COLUMN_CHARS) for name in raw.train.column_names],
        "row_count": len(raw.train),
        "image_count": image_count(data, column) if column else images_checked,
        "bad_image_rows": bad,
        "image_rows_checked": checked,
        "rendered_with": "chat_template" if processor is not None else "plain",
        "note": note or None,
        "rows": shown,
    }
