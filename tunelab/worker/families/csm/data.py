"""Text + audio (+ speaker) rows for a Sesame CSM model: clips to Mimi frames (once), rows to CSM's layout.

The data is the `transcription` shape the other audio families read (an audio column and a
text column, `speech_formats`), with an optional `speaker` column of integer ids (CSM's
speakers; none: speaker 0). Every clip is checked before any is encoded, decoded to the codec's rate and encoded
by the model's own Mimi once, the frames kept in the run's codec cache — as for Orpheus
(`tts_encode`): a bad clip is an error naming its row and path before any clip is encoded,
or with `skip_bad_audio` a skipped row counted in a note, also when a resumed run reads the cache.
A row is what CSM's processor makes of one spoken turn
(`processor(text, audio, output_labels=True)`):
  input_ids  <bos> [speaker]text <eos> <|AUDIO|> x frames <|audio_eos|>
  codes      the frames' codes at the <|AUDIO|> places, the end-of-audio frame (every
             codebook `codebook_eos_token_id`) at <|audio_eos|>
  labels     the codes there, -100 over the text: the loss CSM computes over the codebooks
             (the backbone on the first, the depth decoder on the rest).
A row longer than `max_seq_length` is an error naming the row and both fixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker.data.prepare import PreparedData, _check_batch_fits
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.families.speech.data import check_audio_run
from tunelab.worker.families.speech.formats import WORKING_EXAMPLE, transcript_column

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

IGNORE_INDEX = -100
SPEAKER_COLUMN = "speaker"


@dataclass
class CsmRows(PreparedData):
    longest_frames: int = 0  # frames of the longest clip: how long a sample may grow
    sample_prompt: str = ""  # the "[speaker]text" synthesised at each eval
    encoded: int = 0  # clips encoded by this run (0 when the cache had them all)


def _speaker(row: dict[str, Any], index: int, what: str) -> int | None:
    value = row.get(SPEAKER_COLUMN)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise DataFormatError(SPEAKER_COLUMN, f"row {index} of the {what} data: speaker is {value!r}; a CSM model's speakers are "
                                          "integer ids (0, 1, ...); give each voice a number, or leave the column out for speaker 0")


def _checked(rows: Any, config: WorkerConfig, codec: Any, what: str, output_dir: Path) -> Any:
    """The split's cached frames, or every clip checked (`tts_encode`) before any is encoded.
    A clip's length is checked once encoded (`_rows`): Mimi's frames per second set it."""
    from tunelab.worker.families.tts.encode import check_split

    return check_split(rows, config, codec, what, output_dir, [None] * len(rows), "")


def _rows(rows: Any, clips: Any, config: WorkerConfig, tokenizer: Any, codec: Any, audio_ids: tuple[int, int],
          notes: list[str]) -> tuple[Any, list[str], int, int]:
    import datasets

    from tunelab.worker.families.csm.model import prompt_ids, speaker_prompt
    from tunelab.worker.families.tts.encode import encode_split
    from tunelab.worker.families.vision.data import _source_field, drop_bad_rows

    what = clips.what
    text_name = transcript_column(rows.column_names)
    field_name = _source_field(config, what)
    frames, encoded, note = encode_split(clips, codec, codec.encode)
    notes.append(note)
    limit = config.max_seq_length
    audio, audio_eos = audio_ids
    ids, codes, prompts, bad = [], [], [], []
    for index, (row, clip) in enumerate(zip(rows, frames)):
        if isinstance(clip, str):  # skipped (skip_bad_audio): its reason
            ids.append([]), codes.append([]), prompts.append(""), bad.append(clip)
            continue
        text = row.get(text_name)
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(field_name, f"row {index} of the {what} data: the text (column '{text_name}') is {text!r}; "
                                              f"every row needs the words spoken in its clip, e.g. {WORKING_EXAMPLE}")
        prompt = speaker_prompt(text, _speaker(row, index, what))
        head = prompt_ids(tokenizer, prompt)
        length = len(head) + len(clip) + 1
        if length > limit:
            raise DataFormatError("max_seq_length", f"row {index} of the {what} data is {length} tokens ({len(clip)} of them audio "
                                                    f"frames) and max_seq_length is {limit}; raise max_seq_length, or cut the clip shorter")
        ids.append(head + [audio] * len(clip) + [audio_eos])
        codes.append(clip)
        prompts.append(prompt)
        bad.append(None)
    converted = datasets.Dataset.from_dict({"input_ids": ids, "codes": codes, "bad_audio": bad})
    table = drop_bad_rows(converted, "bad_audio", field_name, what, notes, has="audio that cannot train",
                          whose="audio is missing, unreadable, empty or too long", setting="skip_bad_audio", kind="audio")
    good = [i for i, reason in enumerate(bad) if reason is None]
    return table, [prompts[i] for i in good], max((len(frames[i]) for i in good), default=0), encoded


def prepare(config: WorkerConfig, processor: Any, model_config: Any, codec: Any, raw: Any, output_dir: Path) -> CsmRows:
    check_audio_run(config, raw, "text-to-speech", "text with the audio that speaks it",
                    "a text column and optionally a speaker column (integer ids)", "the audio frames only")
    tokenizer = processor.tokenizer
    audio_ids = (int(model_config.audio_token_id), int(model_config.audio_eos_token_id))
    # Both splits are checked before either is encoded: a bad eval clip costs no training clip's encoding.
    train_clips = _checked(raw.train, config, codec, "training", output_dir)
    eval_clips = _checked(raw.eval, config, codec, "eval", output_dir) if raw.eval is not None else None
    notes: list[str] = []
    train, prompts, longest, encoded = _rows(raw.train, train_clips, config, tokenizer, codec, audio_ids, notes)
    _check_batch_fits(len(train), config)
    eval_set, eval_prompts = None, []
    if eval_clips is not None:
        eval_set, eval_prompts, eval_longest, eval_encoded = _rows(raw.eval, eval_clips, config, tokenizer, codec, audio_ids, notes)
        longest, encoded = max(longest, eval_longest), encoded + eval_encoded
    sample_text = config.tts_sample_text
    sample = speaker_prompt(sample_text) if sample_text else (eval_prompts or prompts)[0]
    collator = CsmCollator(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0, audio_ids,
                           int(model_config.num_codebooks), int(model_config.codebook_eos_token_id))
    return CsmRows(train=train, eval=eval_set, format=raw.format, collator=collator, notes=notes,
                   longest_frames=longest, sample_prompt=sample, encoded=encoded)


class CsmCollator:
    """Right-pads a batch: text ids, the (batch, length, codebooks) codes and labels, where
    the codes stand (`audio`), and the attention mask."""

    def __init__(self, pad_id: int, audio_ids: tuple[int, int], num_codebooks: int, codebook_eos: int):
        self.pad_id, self.audio_ids, self.num_codebooks, self.codebook_eos = pad_id, audio_ids, num_codebooks, codebook_eos

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width, books = max(len(row["input_ids"]) for row in rows), self.num_codebooks
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        codes = torch.zeros((len(rows), width, books), dtype=torch.long)
        labels = torch.full((len(rows), width, books), IGNORE_INDEX, dtype=torch.long)
        audio = torch.zeros((len(rows), width), dtype=torch.bool)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n, frames = len(row["input_ids"]), len(row["codes"])
            ids[i, :n] = torch.tensor(row["input_ids"], dtype=torch.long)
            start = n - frames - 1  # the frames, then the end-of-audio frame, close the row
            if frames:
                codes[i, start:n - 1] = torch.tensor(row["codes"], dtype=torch.long)[:, :books]
            codes[i, n - 1] = self.codebook_eos
            labels[i, start:n] = codes[i, start:n]
            audio[i, start:n] = True
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "codes": codes, "audio": audio, "labels": labels}
