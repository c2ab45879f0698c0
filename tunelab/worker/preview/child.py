"""The dataset preview, run as its own short-lived process: `python -m tunelab.worker.preview.child`.

Reading a dataset needs `datasets` and rendering chat needs a tokenizer (transformers),
neither of which may ever load in the server process. So the server starts this module
as a child, writes `{"config": <worker payload>, "rows": n, "tokenizer": name|null,
"cache_dir": folder}` to its stdin (`datasets` caches go to that folder, which the server
removes afterwards), and reads one JSON answer from its stdout (a spare started with `--warm` does its imports
first and then waits for that request: `preview_spare`):
  {"ok": true, "preview": {format, columns, row_count, rendered_with, rows: [...]}}
(image-text data adds image_count and each shown row's images: `preview_images`;
audio + transcript data its bad clip count: `preview_audio`)
  {"ok": false, "error": {"code", "message", "field"}}
The rows are rendered by the same functions training uses (tunelab.worker.data.prepare), so the
preview shows exactly the text the model will read — cut short, with a visible marker,
where a row is long: each text and chat turn at `ROW_CHARS`, all rows together at
`TOTAL_CHARS`, so the answer the server holds is small whatever the file holds.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

from tunelab.worker.preview.limits import COLUMN_CHARS, MAX_COLUMNS, ROW_CHARS, TOTAL_CHARS, short_messages, truncate

# A spare child (preview_spare.py) starts with this flag: it warms up, then waits for its request.
WARM_FLAG = "--warm"
# The family most models (and the demo) use; another family's tokenizer module is small.
WARM_MODEL_TYPE = "llama"


def _load_tokenizer(name: str, config: WorkerConfig) -> tuple[Any | None, str]:
    """The model's tokenizer (with the fallback template when it has none), or None
    and the reason, when it cannot be had: a preview still shows the data then."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(
            name, token=config.hf_token or None, trust_remote_code=config.trust_remote_code
        )
    except Exception as exc:  # any loader failure only downgrades the preview
        return None, f"the tokenizer of {name} could not be loaded ({type(exc).__name__}); rows are shown without its chat template"
    from tunelab.worker.data.prepare import ensure_chat_template

    ensure_chat_template(tokenizer)
    return tokenizer, ""


def _plain_chat(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)


def build_preview(config: WorkerConfig, rows: int, tokenizer_name: str | None, cache_dir: Path) -> dict[str, Any]:
    from tunelab.worker.data.prepare import load_raw, to_messages, to_plain_text
    from tunelab.worker.methods.preference_formats import PREFERENCE_FORMAT, UNPAIRED_FORMAT
    from tunelab.worker.methods.preference_rows import RowPlace, prompt_turns, row_turns
    from tunelab.worker.methods.prompt_formats import PROMPT_FORMAT, reference_column
    from tunelab.worker.data.tokenization import render, uses_raw_text

    raw = load_raw(config.model_copy(update={"eval_steps": 0}), cache_dir)
    from tunelab.worker.data.formats import image_column
    from tunelab.worker.families.vision.formats import first_image_part

    if image_column(raw.train.column_names) or first_image_part(raw.train):
        from tunelab.worker.preview.images import build_image_preview

        return build_image_preview(config, rows, tokenizer_name, raw, image_column(raw.train.column_names))
    if raw.format == "transcription":
        from tunelab.worker.preview.audio import build_audio_preview

        return build_audio_preview(config, rows, tokenizer_name, raw)
    raw_text = uses_raw_text(raw.format, config)
    tokenizer, note = (None, "")
    if tokenizer_name and not raw_text:
        tokenizer, note = _load_tokenizer(tokenizer_name, config)
    shown, budget = [], TOTAL_CHARS
    for index in range(min(rows, len(raw.train))):
        if budget <= 0:
            break
        row = raw.train[index]
        messages = None
        if raw.format == PREFERENCE_FORMAT:
            # The prompt with the chosen answer as one conversation, the rejected answer after it.
            turns = row_turns(row, config.role_mapping, RowPlace(index))
            messages = short_messages(turns["prompt"] + turns["chosen"])
            text = render(tokenizer, messages) if tokenizer is not None else _plain_chat(messages)
            text += "\n[rejected]\n" + "\n".join(m["content"] for m in turns["rejected"])
        elif raw.format == PROMPT_FORMAT:
            # The prompt as the model sees it before generating; the reference answer after it.
            messages = short_messages(prompt_turns(row["prompt"], config.role_mapping, RowPlace(index)))
            text = render(tokenizer, messages) if tokenizer is not None else _plain_chat(messages)
            reference = reference_column(raw.train.column_names)
            if reference is not None:
                text += f"\n[reference]\n{row[reference]}"
        elif raw.format == UNPAIRED_FORMAT:
            turns = row_turns(row, config.role_mapping, RowPlace(index))
            messages = short_messages(turns["prompt"] + turns["completion"])
            text = render(tokenizer, messages) if tokenizer is not None else _plain_chat(messages)
            text += f"\n[{'desirable' if turns['label'] else 'undesirable'}]"
        elif raw_text:
            text = to_plain_text(row, raw.format, config)
        else:
            # Turns are cut before rendering, so a huge row costs no huge template render.
            messages = short_messages(to_messages(row, raw.format, config))
            text = render(tokenizer, messages) if tokenizer is not None else _plain_chat(messages)
        text = truncate(text, min(ROW_CHARS, budget))
        budget -= len(text) + sum(len(m["content"]) for m in messages or [])
        shown.append({"index": index, "text": text, "messages": messages})
    columns = [truncate(str(name), COLUMN_CHARS) for name in raw.train.column_names[:MAX_COLUMNS]]
    return {
        "format": raw.format,
        "columns": columns,
        "row_count": len(raw.train),
        "rendered_with": "raw_text" if raw_text else ("chat_template" if tokenizer is not None else "plain"),
        "note": note or None,
        "rows": shown,
    }


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    from tunelab.worker.data.prepare import DataFormatError
    from tunelab.worker.run_config import worker_config

    try:
        preview = build_preview(worker_config(request["config"]), int(request["rows"]), request.get("tokenizer"), Path(request["cache_dir"]))
    except DataFormatError as exc:
        return {"ok": False, "error": {"code": "bad_dataset", "message": exc.message, "field": exc.field}}
    except (OSError, ValueError) as exc:
        # Files that cannot be read or parsed; the message names the file.
        return {"ok": False, "error": {"code": "bad_dataset", "message": str(exc), "field": "dataset"}}
    return {"ok": True, "preview": preview}


def warm_up() -> None:
    """Pay for a preview's imports before its request comes (a spare child, `--warm`):
    `datasets`, and everything transformers imports on its first tokenizer load of a model
    folder (its model-loading code, torch, accelerate: seconds), which only a real load
    triggers; so a throwaway tokenizer, in a folder that names a model type, is loaded."""
    import tempfile

    import datasets  # noqa: F401 - imported for its import time
    from tokenizers import Tokenizer, models
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    import tunelab.worker.data.prepare  # noqa: F401
    import tunelab.worker.data.tokenization  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="tunelab-preview-warm-") as folder:
        PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))).save_pretrained(folder)
        Path(folder, "config.json").write_text(json.dumps({"model_type": WARM_MODEL_TYPE}))
        AutoTokenizer.from_pretrained(folder)


def main() -> None:
    # Libraries print progress bars and warnings to stdout; keep the real stdout for the
    # one JSON answer and send everything else to stderr (the server logs it).
    answer_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if WARM_FLAG in sys.argv[1:]:
        try:
            warm_up()
        except Exception as exc:  # noqa: BLE001 - a failed warm-up only leaves the work to the request
            print(f"preview warm-up failed, the request pays for the imports: {exc!r}", file=sys.stderr)
    text = sys.stdin.read()
    if text.strip():  # empty: a spare the server never used (it shut down, or died)
        answer_stream.write(json.dumps(_answer(request=json.loads(text)), default=str))
        answer_stream.flush()
    sys.stderr.flush()
    # The server waits for this process to exit, and an interpreter holding transformers
    # and torch takes seconds to tear itself down (measured: 3.5 s, most of a warm
    # preview); nothing here needs it, the server removes the cache folder.
    os._exit(0)


if __name__ == "__main__":
    main()
