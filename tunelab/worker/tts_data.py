"""Text + audio rows for an Orpheus-style text-to-speech model: clips to codec tokens (once), rows to token ids.

The data is the `transcription` shape speech-to-text reads (an audio column and a text
column, `speech_formats`), with an optional `speaker` column: a speaker's rows are
prompted `"<speaker>: <text>"`, as Orpheus's multi-speaker models are. Every clip is
checked as for speech-to-text before any is encoded (`tts_clips`: a bad clip is an error
naming its row, path and field, or with `skip_bad_audio` a skipped row counted in a note;
too long means more audio than `max_seq_length` leaves room for), decoded and resampled
to the codec's rate (`speech_collator.decode_clip`) and encoded by SNAC once; the codes are kept in the
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
from tunelab.worker.speech_data import check_audio_run, clip_place
from tunelab.worker.tts_layout import FRAME, frames_to_offsets
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


def _codes(rows: Any, config: dict[str, Any], codec: Any, what: str, output_dir: Path,
           rooms: list[int]) -> tuple[list[list[int] | str], int, str]:
    """Every row's audio offsets (or, skipped, its reason): from the cache, else every clip
    checked (`tts_clips`), then the good ones encoded (and cached)."""
    from tunelab.worker import tts_cache
    from tunelab.worker.speech_collator import decode_clip
    from tunelab.worker.tts_clips import check_clips

    skip_bad = bool(config.get("skip_bad_audio"))
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
    # A cache that skipped rows serves only a run that skips them; otherwise they are checked (and refused) again.
    if cached is not None and (skip_bad or not any(isinstance(entry, str) for entry in cached)):
        reused = sum(1 for entry in cached if not isinstance(entry, str))
        return cached, 0, f"Reused the codec tokens of {reused} {what} clips cached in {path}"
    checked = check_clips(raw_refs, place, rooms, codec, skip_bad, int(config.get("max_seq_length") or 2048))
    codes: list[list[int] | str] = []
    for ref in checked:
        if isinstance(ref, str):
            codes.append(ref)
            continue
        coarse, mid, fine = codec.encode(decode_clip(ref, codec.rate))
        codes.append(frames_to_offsets(coarse, mid, fine, codec.codebook_size))
    if path:
        tts_cache.save(path, codes)
    encoded = sum(1 for entry in codes if not isinstance(entry, str))
    return codes, encoded, f"Encoded {encoded} {what} clips to codec tokens (cached in {path})"


def _rows(rows: Any, config: dict[str, Any], tokenizer: Any, layout: Any, codec: Any, what: str,
          output_dir: Path, notes: list[str]) -> tuple[Any, list[str], int, int]:
    import datasets

    from tunelab.worker.vision_data import _source_field, drop_bad_rows

    text_name = transcript_column(rows.column_names)
    field_name = _source_field(config, what)
    limit = int(config.get("max_seq_length") or 2048)
    c = layout.control
    heads, prompts = [], []
    for index, row in enumerate(rows):
        prompt = prompt_of(row, text_name)
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataFormatError(field_name, f"row {index} of the {what} data: the text (column '{text_name}') is {row.get(text_name)!r}; "
                                              f"every row needs the words spoken in its clip, e.g. {WORKING_EXAMPLE}")
        head = prompt_ids(tokenizer, layout, prompt)
        if len(head) + 2 + FRAME > limit:
            raise DataFormatError("max_seq_length", f"row {index} of the {what} data: its text alone is {len(head)} tokens and max_seq_length "
                                                    f"is {limit}, which leaves no room for its audio; raise max_seq_length, or shorten the text")
        heads.append(head)
        prompts.append(prompt)
    codes, encoded, note = _codes(rows, config, codec, what, output_dir, [limit - len(head) - 2 for head in heads])
    notes.append(note)
    ids, labels, bad = [], [], []
    for index, (head, offsets) in enumerate(zip(heads, codes)):
        if isinstance(offsets, str):  # skipped (skip_bad_audio): its reason
            ids.append([]), labels.append([]), bad.append(offsets)
            continue
        tail = layout.audio_ids(offsets) + [c["end_of_speech"], c["end_of_ai"]]
        if len(head) + len(tail) > limit:  # codes cached under a larger max_seq_length
            raise DataFormatError("max_seq_length", f"row {index} of the {what} data is {len(head) + len(tail)} tokens ({len(tail) - 2} of them "
                                                    f"audio) and max_seq_length is {limit}; raise max_seq_length, or cut the clip shorter")
        ids.append(head + tail)
        labels.append([IGNORE_INDEX] * len(head) + tail)
        bad.append(None)
    converted = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels, "bad_audio": bad})
    table = drop_bad_rows(converted, "bad_audio", field_name, what, notes, has="audio that cannot train",
                          whose="audio is missing, unreadable, empty or too long", setting="skip_bad_audio", kind="audio")
    good = [i for i, reason in enumerate(bad) if reason is None]
    longest = max((len(codes[i]) for i in good), default=0)
    return table, [prompts[i] for i in good], longest, encoded


def prepare(config: dict[str, Any], tokenizer: Any, layout: Any, codec: Any, raw: Any, output_dir: Path) -> TtsRows:
    check_audio_run(config, raw, "text-to-speech", "text with the audio that speaks it",
                    "a text column and optionally a speaker column", "the audio tokens only")
    notes: list[str] = []
    train, prompts, longest, encoded = _rows(raw.train, config, tokenizer, layout, codec, "training", output_dir, notes)
    _check_batch_fits(len(train), config)
    eval_set, eval_prompts = None, []
    if raw.eval is not None:
        eval_set, eval_prompts, eval_longest, eval_encoded = _rows(raw.eval, config, tokenizer, layout, codec, "eval", output_dir, notes)
        longest, encoded = max(longest, eval_longest), encoded + eval_encoded
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
