"""Text + audio rows for an Orpheus-style text-to-speech model: clips to codec tokens (once), rows to token ids.

The data is the `transcription` shape speech-to-text reads (an audio column and a text
column, `speech_formats`), with an optional `speaker` column: a speaker's rows are
prompted `"<speaker>: <text>"`, as Orpheus's multi-speaker models are. Every clip is
checked as for speech-to-text before any is encoded, in both splits (`tts_encode`, with `tts_clips`' length limit: a bad clip is an error
naming its row, path and field, or with `skip_bad_audio` a skipped row counted in a note;
too long means more audio than `max_seq_length` leaves room for), decoded and resampled
to the codec's rate (`speech_collator.decode_clip`) and encoded by SNAC once; the codes are kept in the
run's codec cache (`tts_cache`) and a resumed run reads them back without decoding or
encoding a clip. Each row becomes Orpheus's layout (tts_layout)
  input_ids  <start_of_human> BOS text <end-of-text> <end_of_human> <start_of_ai> <start_of_speech> audio <end_of_speech> <end_of_ai>
  labels     -100 over the prompt (through <start_of_speech>): the loss is on the audio and its end markers.
A row longer than `max_seq_length` is an error naming the row and both fixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker.data.prepare import PreparedData, _check_batch_fits
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.families.speech.formats import WORKING_EXAMPLE, transcript_column
from tunelab.worker.families.speech.data import check_audio_run
from tunelab.worker.families.tts.layout import FRAME, frames_to_offsets

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

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
    """The prompt half of a row, as Orpheus's engine sends it: everything up to <start_of_speech>."""
    c = layout.control
    text = list(tokenizer(prompt).input_ids)  # with the tokenizer's special tokens, as Orpheus encodes
    if layout.bos is not None and text[:1] != [layout.bos]:
        text.insert(0, layout.bos)  # a tokenizer that adds no BOS (Llama 3's does)
    return [c["start_of_human"], *text, layout.end_of_text, c["end_of_human"], c["start_of_ai"], c["start_of_speech"]]


def speech_ids(layout: Any, offsets: list[int]) -> list[int]:
    """The rest of a row: the audio tokens, then <end_of_speech> <end_of_ai>."""
    return layout.audio_ids(offsets) + [layout.control["end_of_speech"], layout.control["end_of_ai"]]


@dataclass
class _Split:
    """One split, checked and ready to encode: what `_checked` found before any clip is encoded."""
    field: str
    heads: list[list[int]]  # each row's prompt ids
    prompts: list[str]
    clips: Any  # tts_encode.CheckedSplit


def _checked(rows: Any, config: WorkerConfig, tokenizer: Any, layout: Any, codec: Any, what: str, output_dir: Path) -> _Split:
    """Every row's text, then its cached codes or every clip checked (`tts_encode`): all the
    refusals a split can meet, before the codec encodes anything."""
    from tunelab.worker.families.tts.clips import longest_clips
    from tunelab.worker.families.tts.encode import check_split
    from tunelab.worker.families.vision.data import _source_field

    text_name = transcript_column(rows.column_names)
    field_name = _source_field(config, what)
    limit = config.max_seq_length
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
    limit_text = f"max_seq_length {limit} (raise it for longer clips) leaves this row's audio"
    longest = longest_clips(codec, [limit - len(head) - 2 for head in heads])
    clips = check_split(rows, config, codec, what, output_dir, longest, limit_text)
    return _Split(field_name, heads, prompts, clips)


def _rows(split: _Split, config: WorkerConfig, layout: Any, codec: Any, notes: list[str]) -> tuple[Any, list[str], int, int]:
    import datasets

    from tunelab.worker.families.tts.encode import encode_split
    from tunelab.worker.families.vision.data import drop_bad_rows

    def encode(clip: Any) -> list[int]:
        return frames_to_offsets(*codec.encode(clip), codec.codebook_size)

    codes, encoded, note = encode_split(split.clips, codec, encode)
    notes.append(note)
    limit = config.max_seq_length
    ids, labels, bad = [], [], []
    for index, (head, offsets) in enumerate(zip(split.heads, codes)):
        if isinstance(offsets, str):  # skipped (skip_bad_audio): its reason
            ids.append([]), labels.append([]), bad.append(offsets)
            continue
        tail = speech_ids(layout, offsets)
        if len(head) + len(tail) > limit:  # codes cached under a larger max_seq_length
            raise DataFormatError("max_seq_length", f"row {index} of the {split.clips.what} data is {len(head) + len(tail)} tokens ({len(tail) - 2} "
                                                    f"of them audio) and max_seq_length is {limit}; raise max_seq_length, or cut the clip shorter")
        ids.append(head + tail)
        labels.append([IGNORE_INDEX] * len(head) + tail)
        bad.append(None)
    converted = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels, "bad_audio": bad})
    table = drop_bad_rows(converted, "bad_audio", split.field, split.clips.what, notes, has="audio that cannot train",
                          whose="audio is missing, unreadable, empty or too long", setting="skip_bad_audio", kind="audio")
    good = [i for i, reason in enumerate(bad) if reason is None]
    return table, [split.prompts[i] for i in good], max((len(codes[i]) for i in good), default=0), encoded


def prepare(config: WorkerConfig, tokenizer: Any, layout: Any, codec: Any, raw: Any, output_dir: Path) -> TtsRows:
    check_audio_run(config, raw, "text-to-speech", "text with the audio that speaks it",
                    "a text column and optionally a speaker column", "the audio tokens only")
    # Both splits are checked before either is encoded: a bad eval clip costs no training clip's encoding.
    train_split = _checked(raw.train, config, tokenizer, layout, codec, "training", output_dir)
    eval_split = _checked(raw.eval, config, tokenizer, layout, codec, "eval", output_dir) if raw.eval is not None else None
    notes: list[str] = []
    train, prompts, longest, encoded = _rows(train_split, config, layout, codec, notes)
    _check_batch_fits(len(train), config)
    eval_set, eval_prompts = None, []
    if eval_split is not None:
        eval_set, eval_prompts, eval_longest, eval_encoded = _rows(eval_split, config, layout, codec, notes)
        longest, encoded = max(longest, eval_longest), encoded + eval_encoded
    sample = config.tts_sample_text or (eval_prompts or prompts)[0]
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
