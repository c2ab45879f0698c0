"""Text + audio rows for an Orpheus-style text-to-speech model: clips to codec tokens (once), rows to token ids.

The data is the `transcription` shape speech-to-text reads (an audio column and a text
column, `speech_formats`), with an optional `speaker` column: a speaker's rows are
prompted `"<speaker>: <text>"`, as Orpheus's multi-speaker models are. Every clip is
checked exactly as for speech-to-text (`speech_data.checked_clip`: a bad clip is an error
naming its row, path and field, before training), decoded and resampled to the codec's
rate (`speech_collator.decode_clip`) and encoded by SNAC once; the codes are kept in the
run's codec cache (`tts_cache`) and a resumed run reads them back without decoding or
encoding a clip. Each row becomes (tts_layout)
  input_ids  <start_of_human> text <end_of_human> <start_of_ai> <start_of_speech> audio <end_of_speech> <end_of_ai>
  labels     -100 over the prompt (through <start_of_speech>): the loss is on the audio and its end markers.
A row longer than `max_seq_length` is an error naming the row and both fixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab.worker.data import PreparedData, _check_batch_fits
from tunelab.worker.formats import DataFormatError
from tunelab.worker.speech_formats import WORKING_EXAMPLE, audio_column, transcript_column
from tunelab.worker.speech_data import check_audio_run, checked_clip, clip_place
from tunelab.worker.tts_layout import frames_to_offsets
from tunelab.worker.vision_data import image_reference

IGNORE_INDEX = -100
SPEAKER_COLUMN = "speaker"


@dataclass
class TtsRows(PreparedData):
    longest_audio: int = 0  # audio tokens of the longest clip: how long a sample may grow
    sample_prompt: str = ""  # the sentence synthesised at each eval
    encoded: int = 0  # clips encoded by this run (0 when the cache had them all)


def prompt_of(row: dict[str, Any], text_name: str) -> str:
    speaker = row.get(SPEAKER_COLUMN)
    text = row.get(text_name)
    return f"{speaker}: {text}" if isinstance(speaker, str) and speaker.strip() else text


def prompt_ids(tokenizer: Any, layout: Any, prompt: str) -> list[int]:
    c = layout.control
    return [c["start_of_human"]] + tokenizer(prompt).input_ids + [c["end_of_human"], c["start_of_ai"], c["start_of_speech"]]


def _codes(rows: Any, config: dict[str, Any], codec: Any, what: str, output_dir: Path) -> tuple[list[list[int]], int, str]:
    """Every row's audio offsets: from the cache, else encoded now (and cached)."""
    from tunelab.worker import tts_cache
    from tunelab.worker.speech_collator import decode_clip

    audio_name = audio_column(rows.column_names)
    place = clip_place(config, what, audio_name)
    raw_refs = rows[audio_name]
    try:
        refs = [image_reference(ref, place.folders) for ref in raw_refs]
    except Exception:  # a reference of the wrong shape: checked_clip names its row below
        refs = None
    key = tts_cache.cache_key(codec.fingerprint, codec.rate, tts_cache.dataset_fingerprint(config, rows), refs) if refs else None
    path = tts_cache.cache_file(output_dir, what, key) if key else None
    cached = tts_cache.load(path, len(rows)) if path else None
    if cached is not None:
        return cached, 0, f"Reused the codec tokens of {len(rows)} {what} clips cached in {path}"
    codes = []
    for index, raw_ref in enumerate(raw_refs):
        ref = checked_clip(raw_ref, index, place, None)
        coarse, mid, fine = codec.encode(decode_clip(ref, codec.rate))
        codes.append(frames_to_offsets(coarse, mid, fine, codec.codebook_size))
    if path:
        tts_cache.save(path, codes)
    return codes, len(rows), f"Encoded {len(rows)} {what} clips to codec tokens (cached in {path})"


def _rows(rows: Any, config: dict[str, Any], tokenizer: Any, layout: Any, codec: Any, what: str,
          output_dir: Path) -> tuple[Any, list[str], int, int, str]:
    import datasets

    from tunelab.worker.vision_data import _source_field

    text_name = transcript_column(rows.column_names)
    field_name = _source_field(config, what)
    codes, encoded, note = _codes(rows, config, codec, what, output_dir)
    limit = int(config.get("max_seq_length") or 2048)
    c = layout.control
    ids, labels, prompts = [], [], []
    for index, (row, offsets) in enumerate(zip(rows, codes)):
        prompt = prompt_of(row, text_name)
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataFormatError(field_name, f"row {index} of the {what} data: the text (column '{text_name}') is {row.get(text_name)!r}; "
                                              f"every row needs the words spoken in its clip, e.g. {WORKING_EXAMPLE}")
        head = prompt_ids(tokenizer, layout, prompt)
        tail = layout.audio_ids(offsets) + [c["end_of_speech"], c["end_of_ai"]]
        if len(head) + len(tail) > limit:
            raise DataFormatError("max_seq_length", f"row {index} of the {what} data is {len(head) + len(tail)} tokens ({len(tail) - 2} of them "
                                                    f"audio) and max_seq_length is {limit}; raise max_seq_length, or cut the clip shorter")
        ids.append(head + tail)
        labels.append([IGNORE_INDEX] * len(head) + tail)
        prompts.append(prompt)
    longest = max((len(o) for o in codes), default=0)
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}), prompts, longest, encoded, note


def prepare(config: dict[str, Any], tokenizer: Any, layout: Any, codec: Any, raw: Any, output_dir: Path) -> TtsRows:
    check_audio_run(config, raw, "text-to-speech", "text with the audio that speaks it",
                    "a text column and optionally a speaker column", "the audio tokens only")
    train, prompts, longest, encoded, note = _rows(raw.train, config, tokenizer, layout, codec, "training", output_dir)
    _check_batch_fits(len(train), config)
    notes = [note]
    eval_set, eval_prompts = None, []
    if raw.eval is not None:
        eval_set, eval_prompts, eval_longest, eval_encoded, eval_note = _rows(raw.eval, config, tokenizer, layout, codec, "eval", output_dir)
        longest, encoded = max(longest, eval_longest), encoded + eval_encoded
        notes.append(eval_note)
    sample = config.get("tts_sample_text") or (eval_prompts or prompts)[0]
    return TtsRows(train=train, eval=eval_set, format=raw.format, collator=TtsCollator(layout.control["pad"]), notes=notes,
                   longest_audio=longest, sample_prompt=sample, encoded=encoded)


class TtsCollator:
    """Right-pads a batch: ids with the layout's pad token, labels with -100, and the attention mask."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(row["input_ids"]) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n] = torch.tensor(row["input_ids"], dtype=torch.long)
            labels[i, :n] = torch.tensor(row["labels"], dtype=torch.long)
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
