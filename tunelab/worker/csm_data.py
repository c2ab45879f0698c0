"""Text + audio (+ speaker) rows for a Sesame CSM model: clips to Mimi frames (once), rows to CSM's layout.

The data is the `transcription` shape the other audio families read (an audio column and a
text column, `speech_formats`), with an optional `speaker` column of integer ids (CSM's
speakers; none: speaker 0). Each clip is checked, decoded to the codec's rate and encoded
by the model's own Mimi once, the frames kept in the run's codec cache (`tts_cache`), so a
resumed run encodes nothing (`skip_bad_audio` is Orpheus's only so far: a bad clip is an
error naming its row and path, before any clip is encoded). A row is what CSM's processor makes of one spoken turn
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
from typing import Any

from tunelab.worker.data import PreparedData, _check_batch_fits
from tunelab.worker.formats import DataFormatError
from tunelab.worker.speech_data import check_audio_run
from tunelab.worker.speech_formats import WORKING_EXAMPLE, transcript_column

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


def _frames(rows: Any, config: dict[str, Any], codec: Any, what: str, output_dir: Path) -> tuple[list[Any], int, str]:
    """Every row's frames: from the run's codec cache (`tts_cache`, keyed as for Orpheus by
    the codec, the data and the split's clips), else every clip checked first — a bad one
    is an error naming its row, path and field before any is encoded — then encoded and cached."""
    from tunelab.worker import tts_cache
    from tunelab.worker.speech_collator import decode_clip
    from tunelab.worker.speech_data import checked_clip, clip_place
    from tunelab.worker.speech_formats import audio_column
    from tunelab.worker.vision_data import image_reference

    place = clip_place(config, what, audio_column(rows.column_names))
    raw_refs = rows[audio_column(rows.column_names)]
    try:
        refs = [image_reference(ref, place.folders) for ref in raw_refs]
    except Exception:  # a reference of the wrong shape: checked_clip names its row below
        refs = None
    key = tts_cache.cache_key(codec.fingerprint, codec.rate, tts_cache.dataset_fingerprint(config, rows), refs) if refs else None
    path = tts_cache.cache_file(output_dir, what, key) if key else None
    cached = tts_cache.load(path, len(rows)) if path else None
    if cached is not None and not any(isinstance(entry, str) for entry in cached):
        return cached, 0, f"Reused the codec tokens of {len(rows)} {what} clips cached in {path}"
    checked = [checked_clip(raw_ref, index, place, None) for index, raw_ref in enumerate(raw_refs)]
    frames = [codec.encode(decode_clip(ref, codec.rate)) for ref in checked]
    if path:
        tts_cache.save(path, frames)
    return frames, len(rows), f"Encoded {len(rows)} {what} clips to codec tokens (cached in {path})"


def _rows(rows: Any, config: dict[str, Any], tokenizer: Any, codec: Any, audio_ids: tuple[int, int], what: str,
          output_dir: Path) -> tuple[Any, list[str], int, int, str]:
    import datasets

    from tunelab.worker.csm_model import prompt_ids, speaker_prompt
    from tunelab.worker.vision_data import _source_field

    text_name = transcript_column(rows.column_names)
    field_name = _source_field(config, what)
    frames, encoded, note = _frames(rows, config, codec, what, output_dir)
    limit = int(config.get("max_seq_length") or 2048)
    audio, audio_eos = audio_ids
    ids, codes, prompts = [], [], []
    for index, (row, clip) in enumerate(zip(rows, frames)):
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
    longest = max((len(clip) for clip in frames), default=0)
    return datasets.Dataset.from_dict({"input_ids": ids, "codes": codes}), prompts, longest, encoded, note


def prepare(config: dict[str, Any], processor: Any, model_config: Any, codec: Any, raw: Any, output_dir: Path) -> CsmRows:
    check_audio_run(config, raw, "text-to-speech", "text with the audio that speaks it",
                    "a text column and optionally a speaker column (integer ids)", "the audio frames only")
    tokenizer = processor.tokenizer
    audio_ids = (int(model_config.audio_token_id), int(model_config.audio_eos_token_id))
    train, prompts, longest, encoded, note = _rows(raw.train, config, tokenizer, codec, audio_ids, "training", output_dir)
    _check_batch_fits(len(train), config)
    notes = [note]
    eval_set, eval_prompts = None, []
    if raw.eval is not None:
        eval_set, eval_prompts, eval_longest, eval_encoded, eval_note = _rows(raw.eval, config, tokenizer, codec, audio_ids, "eval", output_dir)
        longest, encoded = max(longest, eval_longest), encoded + eval_encoded
        notes.append(eval_note)
    sample_text = config.get("tts_sample_text")
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
