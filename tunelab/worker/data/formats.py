"""Dataset formats: recognising them and turning a row into chat messages or plain text.

Four shapes are understood, named after the datasets that made them popular:
  alpaca    `instruction`, `output` (+ optional `input`, `system`) columns
  sharegpt  a conversation column of `{"from", "value"}` turns (human/gpt/system/...)
  chatml    a conversation column of `{"role", "content"}` turns
  text      one text column (raw text; also what continued pretraining reads)
  caption   an image column (`images`/`image`) and a text column: image-text data, read
            by `vision_formats` (any format above with an image column is image data too)
  pairs, triplets, scored_pairs, labelled_pairs
            what embedding models train on (`embedding_formats`: anchor/positive[/negative],
            sentence1/sentence2/score, query/document/label)
  transcription  an audio column and a transcript column: speech-to-text data, read by
            `speech_formats` / `speech_data`
  preference  chosen/rejected with a given or implicit prompt (strings, messages lists,
            LLaMA-Factory's turn objects), what DPO, ORPO, SimPO and KTO train on;
            unpaired_preference prompt/completion/label or messages + label, KTO's own
            (`preference_formats`; split into turns by `preference_rows`)
  prompt_only  a prompt column (+ an optional reference answer): what GRPO trains on
            (`prompt_formats`; rendered by `worker/methods/grpo`)
Rows reaching `to_messages` carry canonical column names (`sources.load_raw` renames
columns through `column_mapping` first). Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker.data.rows import CONVERSATION_COLUMNS, DataFormatError, _alpaca_messages, _map_role, _text, conversation_column, image_column
from tunelab.worker.methods import preference_formats
from tunelab.worker.methods import prompt_formats
from tunelab.worker.families.embedding.formats import EMBEDDING_FORMATS, describe_shapes, detect_embedding_format, missing_columns
from tunelab.worker.families.speech.formats import TRANSCRIPTION, audio_column, transcript_column, transcription_shape
from tunelab.worker.families.vision.formats import unknown_image_shape

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

FORMATS = ("alpaca", "sharegpt", "chatml", "text", "caption", *EMBEDDING_FORMATS, TRANSCRIPTION,
           preference_formats.PREFERENCE_FORMAT, preference_formats.UNPAIRED_FORMAT, prompt_formats.PROMPT_FORMAT)


def _first_turn(rows: list[dict[str, Any]], column: str) -> dict[str, Any] | None:
    for row in rows:
        turns = row.get(column)
        if isinstance(turns, list):
            for turn in turns:
                if isinstance(turn, dict):
                    return turn
    return None


def detect_format(columns: list[str], sample_rows: list[dict[str, Any]]) -> str:
    """Name the format of data with these columns, or raise DataFormatError listing them."""
    columns = list(columns)
    if "instruction" in columns and "output" in columns:
        return "alpaca"
    # Before the conversation check: conversational preference rows may also carry a
    # messages column, and their chosen/rejected columns are what marks them.
    if preference_formats.is_preference(columns):
        return preference_formats.PREFERENCE_FORMAT
    if preference_formats.is_unpaired(columns, sample_rows):
        return preference_formats.UNPAIRED_FORMAT
    conv = conversation_column(columns)
    if conv:
        turn = _first_turn(sample_rows, conv)
        keys = sorted(k for k, v in (turn or {}).items() if v is not None)
        if "from" in keys and "value" in keys:
            return "sharegpt"
        if "role" in keys and "content" in keys:
            return "chatml"
        raise DataFormatError(
            "format",
            f"column '{conv}' looks like a conversation but its turns have keys {keys}; "
            "tunelab reads turns with from/value (sharegpt) or role/content (chatml) keys. "
            "Convert the turns, or map another column with column_mapping",
        )
    if prompt_formats.is_prompt_only(columns):
        return prompt_formats.PROMPT_FORMAT
    if transcription_shape(columns, sample_rows):
        return TRANSCRIPTION
    if image_column(columns):
        if "text" in columns:
            return "caption"
        raise unknown_image_shape(columns)
    embedding = detect_embedding_format(columns)
    if embedding:
        return embedding
    if "text" in columns or (len(columns) == 1 and all(isinstance(r.get(columns[0]), str) for r in sample_rows)):
        return "text"
    raise DataFormatError(
        "format",
        f"cannot tell the data format from the columns {columns}. Expected instruction/output "
        f"(alpaca), a conversation column ({'/'.join(CONVERSATION_COLUMNS[:2])}) with from/value "
        "or role/content turns (sharegpt/chatml), or a single text column; for an embedding model "
        f"{describe_shapes()}; for a preference objective (dpo, orpo, simpo) "
        f"{preference_formats.describe_shape()}; {prompt_formats.describe_shape()}{_first_row(sample_rows)}. "
        "Set format and map your columns with column_mapping, e.g. {instruction: question, output: answer}, "
        "{anchor: question, positive: answer}, {prompt: question, chosen: good_answer, rejected: bad_answer} or "
        "{prompt: question, reference: answer}",
    )


def _first_row(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    text = repr({k: (v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v) for k, v in rows[0].items()})
    return f". The first row is {text if len(text) <= 300 else text[:300] + '…'}"


def required_columns(fmt: str, columns: list[str], sample_rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The canonical columns a format needs that are missing from `columns`."""
    if fmt == "alpaca":
        return [c for c in ("instruction", "output") if c not in columns]
    if fmt in ("sharegpt", "chatml"):
        return [] if conversation_column(columns) else ["conversations or messages"]
    if fmt == "caption":
        return [c for c, ok in (("image", image_column(columns)), ("text", "text" in columns)) if not ok]
    if fmt in EMBEDDING_FORMATS:
        return missing_columns(fmt, columns)
    if fmt == "transcription":
        return [c for c, ok in (("audio", audio_column(columns)), ("text", transcript_column(columns))) if not ok]
    if fmt == preference_formats.PREFERENCE_FORMAT:
        return preference_formats.missing_columns(columns, sample_rows or [])
    if fmt == preference_formats.UNPAIRED_FORMAT:
        return preference_formats.missing_unpaired_columns(columns)
    if fmt == prompt_formats.PROMPT_FORMAT:
        return [] if "prompt" in columns else ["prompt"]
    return [] if "text" in columns else ["text"]


def _content_text(content: Any, column: str) -> str:
    """A turn's content as text: a string, or OpenAI-style content parts that are all text
    ({"type": "text", "text": ...}), joined as one message. Parts of another kind (images,
    audio) need a model of that family, which reads them elsewhere."""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "\n".join(_text(p.get("text"), f"{column}[].content[].text") for p in content)
    if isinstance(content, list):
        kinds = sorted({str(p.get("type")) if isinstance(p, dict) else type(p).__name__ for p in content} - {"text"})
        raise DataFormatError("dataset", f"column '{column}' has a turn whose content parts include {kinds}, which a text "
                                         "model cannot read; train an image-text-to-text (or audio) model on such rows, or "
                                         "keep only text parts")
    return _text(content, f"{column}[].content")


def _conversation_messages(row: dict[str, Any], fmt: str, role_mapping: dict[str, str]) -> list[dict[str, str]]:
    column = conversation_column(list(row))
    turns = row.get(column) if column else None
    if not isinstance(turns, list):
        raise DataFormatError("format", f"a row has no conversation list (columns: {sorted(row)})")
    role_key, content_key = ("from", "value") if fmt == "sharegpt" else ("role", "content")
    messages = []
    for turn in turns:
        if not isinstance(turn, dict) or turn.get(role_key) is None:
            raise DataFormatError("format", f"a {fmt} turn needs '{role_key}' and '{content_key}' keys, got {turn!r}")
        messages.append({"role": _map_role(str(turn[role_key]), fmt, role_mapping),
                         "content": _content_text(turn.get(content_key), str(column))})
    system = _text(row.get("system"), "system")
    if system.strip() and not (messages and messages[0]["role"] == "system"):
        messages.insert(0, {"role": "system", "content": system})
    return messages


def to_messages(row: dict[str, Any], fmt: str, config: WorkerConfig) -> list[dict[str, str]] | str:
    """Chat messages for a row (`{"role", "content"}` dicts), or the raw text for `text` data."""
    if fmt == "text":
        return _text(row.get("text"), "text")
    if fmt == "alpaca":
        return _alpaca_messages(row)
    if fmt in ("sharegpt", "chatml"):
        return _conversation_messages(row, fmt, config.role_mapping)
    if fmt == "caption":
        raise DataFormatError("model_name", "caption data pairs images with text; train it on an image-text-to-text model")
    if fmt in EMBEDDING_FORMATS:
        raise DataFormatError("model_name", f"{fmt} data trains an embedding model and {config.model_name} is a generative "
                                            "model; point model_name at an encoder or a sentence-transformers model")
    if fmt == "transcription":
        raise DataFormatError("model_name", "transcription data pairs audio with its transcript; train it on a speech-to-text model (e.g. Whisper)")
    if fmt in (preference_formats.PREFERENCE_FORMAT, preference_formats.UNPAIRED_FORMAT):
        raise DataFormatError("objective", f"{fmt} data ({'/'.join(preference_formats.UNPAIRED_COLUMNS if fmt == preference_formats.UNPAIRED_FORMAT else preference_formats.PREFERENCE_COLUMNS)}) trains a preference objective and this run's objective is "
                                           f"{config.objective}; set objective={'kto' if fmt == preference_formats.UNPAIRED_FORMAT else 'dpo (or orpo, simpo, kto)'}, or give instruction or chat data")
    if fmt == prompt_formats.PROMPT_FORMAT:
        raise DataFormatError("objective", f"prompt_only data (a prompt column without answers) trains objective=grpo and this run's "
                                           f"objective is {config.objective}; set objective=grpo with rewards, or give "
                                           "instruction or chat data")
    raise DataFormatError("format", f"unknown format '{fmt}'; use one of {list(FORMATS)}")


def to_plain_text(row: dict[str, Any], fmt: str, config: WorkerConfig) -> str:
    """A row as raw text without any chat markup (continued pretraining reads this; a
    dataset preview shows an embedding row as one `column: value` line per column)."""
    if fmt in EMBEDDING_FORMATS:
        return "\n".join(f"{column}: {_text(row.get(column), column)}" for column in EMBEDDING_FORMATS[fmt])
    rendered = to_messages(row, fmt, config)
    if isinstance(rendered, str):
        return rendered
    return "\n\n".join(m["content"] for m in rendered if m["content"])
