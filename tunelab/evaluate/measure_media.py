"""The eval child's measurements for runs that read images or audio: loss on the eval split
through the family's own collator (vision-language, audio chat, speech-to-text), answers
to the eval rows' images (vision-language), and transcripts with their word error rate
(speech-to-text).

An audio chat run's generations are its eval rows' clips and questions answered.
The eval rows are prepared by the training family's `prepare` (the same checks, tokens,
loss mask and collator as training), given the eval split where it takes its training
rows. The loss follows the Trainer's eval convention as `measure.mean_loss` does: batches
of `batch_size` rows in order, each batch's mean loss, weighted by its row count. The word
error rate is the speech trainer's own (`speech_trainer.word_error_rate`, jiwer), over every
eval clip, with generation started as the labels start (`speech_prefix.generation_kwargs`).
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tunelab.worker.data.formats import DataFormatError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

IGNORE_INDEX = -100


def _eval_rows(loaded: Any, config: WorkerConfig, raw: Any) -> Any:
    """The eval split prepared as the family prepares training rows: (rows, collator)."""
    from tunelab.worker.data.sources import RawData

    as_training = RawData(train=raw.eval, eval=None, format=raw.format)
    # Relative media paths resolve against the eval files' folders too; any batch size fits
    # (the real one batches the loss below).
    settings = config.model_copy(update={"batch_size": 1, "local_datasets": config.local_eval_datasets + config.local_datasets})
    prepared = loaded.family.module().eval_rows(settings, loaded.processor, loaded.model, as_training)
    if len(prepared.train) == 0:
        raise DataFormatError("eval_split", "the eval split has no rows with tokens to measure")
    return prepared.train, prepared.collator


def _batches(rows: Any, collator: Any, batch_size: int, device: str, dtype: Any) -> Any:
    import torch

    for start in range(0, len(rows), batch_size):
        batch = collator([rows[i] for i in range(start, min(start + batch_size, len(rows)))])
        yield {key: (value.to(device, dtype) if torch.is_floating_point(value) else value.to(device))
               for key, value in batch.items()}


def loss(loaded: Any, config: WorkerConfig, raw: Any) -> dict[str, Any]:
    """Loss and perplexity of the fine-tune and of its base on the eval rows (the perplexity payload)."""
    import torch

    rows, collator = _eval_rows(loaded, config, raw)
    batch_size = config.batch_size
    # A chat model predicts each label from the tokens before it; a transcribing (speech-to-text)
    # one's labels are its decoder's own.
    causal = loaded.family.serves != "transcribe"
    result: dict[str, Any] = {}
    for side, adapter in (("fine_tune", True), ("base", False)):
        model, context = loaded.model_for(adapter)
        weighted, counted, tokens = 0.0, 0, 0
        with context, torch.inference_mode():
            for batch in _batches(rows, collator, batch_size, loaded.device, model.dtype):
                n = int(batch["labels"].shape[0])
                weighted += float(model(**batch).loss) * n
                counted += n
                labels = batch["labels"][:, 1:] if causal else batch["labels"]
                tokens += int((labels != IGNORE_INDEX).sum())
        mean = weighted / counted
        finite = math.isfinite(mean)
        result[side] = {"loss": mean if finite else None, "perplexity": math.exp(mean) if finite and mean < 700 else None}
        result.update(rows=counted, tokens=tokens)
    result["batch_size"] = batch_size
    return result


def _media_file(kind: str, ref: Any, index: int, config: WorkerConfig) -> bytes:
    """The bytes of eval row `index`'s image or clip, read as training read it (relative to the
    data files; in a server's evaluation only inside the data roots), or a DataFormatError naming the row."""
    if kind == "audio":
        from tunelab.worker.families.speech.data import checked_clip, clip_place

        found = checked_clip(ref, index, clip_place(config, "eval", "audio"), None)  # checks the place and decodes it once
    else:
        from tunelab.worker.families.vision.data import check_image, run_image_sources

        try:  # every form training reads (paths in the data roots, bytes, data: URIs, cached URLs), by its rules
            found = run_image_sources(config, "eval").resolve(ref)
        except Exception as exc:  # noqa: BLE001 - a refusal or bad reference, named for the user with its row
            raise DataFormatError("eval_split", f"row {index} of the eval data: image {exc}") from None
        try:
            check_image(found)
        except Exception as exc:  # noqa: BLE001 - named for the user with its row
            raise DataFormatError("eval_split", f"row {index} of the eval data: image {found.get('path') or '(embedded)'} "
                                                f"cannot be read ({exc})") from exc
    return found["bytes"] or Path(found["path"]).read_bytes()


def media_prompts(raw: Any, config: WorkerConfig, kind: str, count: int) -> list[dict[str, Any]]:
    """Prompts from the first eval rows of a vision (`kind` image) or audio chat (audio) run:
    the conversation up to its last assistant turn, its media inline (the child's form),
    that turn's text the reference."""
    if kind == "image":
        from tunelab.worker.families.vision.formats import vision_messages as row_messages
    else:
        from tunelab.worker.families.audio_chat.formats import audio_messages as row_messages

    prompts: list[dict[str, Any]] = []
    for index, row in enumerate(raw.eval):
        if len(prompts) >= count:
            break
        messages, refs = row_messages(row, raw.format, config)[:2]  # vision also says where each image sat
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if not last:
            continue
        pending = iter([base64.b64encode(_media_file(kind, ref, index, config)).decode("ascii") for ref in refs])

        def inline(content: Any) -> Any:
            if not isinstance(content, list):
                return content
            return [{"type": kind, "data": next(pending)} if part.get("type") == kind else part for part in content]

        reference = messages[last]["content"]
        if isinstance(reference, list):
            reference = "".join(p.get("text", "") for p in reference if p.get("type") == "text")
        prompts.append({"messages": [{**m, "content": inline(m["content"])} for m in messages[:last]], "reference": reference})
    return prompts


def without_media_data(item: dict[str, Any]) -> dict[str, Any]:
    """A stored item's messages keep where each image was, not its bytes."""
    if "messages" not in item:
        return item
    messages = [{**m, "content": [{"type": p["type"]} if p.get("type") in ("image", "audio") else p for p in m["content"]]}
                if isinstance(m.get("content"), list) else m for m in item["messages"]]
    return {**item, "messages": messages}


def transcripts(loaded: Any, config: WorkerConfig, raw: Any, max_items: int, max_new_tokens: int,
                progress: Callable[[str], None]) -> dict[str, Any]:
    """Every eval clip transcribed by the base and by the fine-tune, and each side's word
    error rate against the transcripts (the generations payload of a speech-to-text run)."""
    import torch

    from tunelab.worker.families.speech.prefix import carry_to_generation, generation_kwargs
    from tunelab.worker.families.speech.trainer import word_error_rate

    rows, collator = _eval_rows(loaded, config, raw)
    tokenizer = loaded.tokenizer
    batch_size = config.batch_size
    references = [tokenizer.decode(list(rows[i]["labels"]), skip_special_tokens=True).strip() for i in range(len(rows))]
    # The decoder's window holds the transcript's prefix (Whisper: <sot><lang><task><notimestamps>) and the words.
    window = getattr(loaded.model.config, "max_target_positions", None) or getattr(loaded.model.config, "max_position_embeddings", None)
    if window:
        special = set(tokenizer.all_special_ids)
        prefix = next((i for i, token in enumerate(rows[0]["labels"]) if token not in special), 0)
        max_new_tokens = max(1, min(max_new_tokens, window - prefix - 1))
    heard: dict[str, list[str]] = {}
    for side, adapter in (("base", False), ("fine_tune", True)):
        progress(f"transcribing {len(rows)} eval clips ({side.replace('_', '-')})")
        model, context = loaded.model_for(adapter)
        carry_to_generation(model, tokenizer)  # both sides start as the run's labels did (its language and task)
        found: list[str] = []
        with context, torch.inference_mode():
            for batch in _batches(rows, collator, batch_size, loaded.device, model.dtype):
                batch.pop("labels")
                ids = model.generate(**batch, **generation_kwargs(model), max_new_tokens=max_new_tokens)
                found += [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        heard[side] = found
    items = [{"prompt": f"eval clip {i + 1}", "reference": references[i],
              "base": {"text": heard["base"][i]}, "fine_tune": {"text": heard["fine_tune"][i]}}
             for i in range(min(max_items, len(rows)))]
    return {"source": "eval split", "items": items, "rows": len(rows),
            "wer": {side: word_error_rate(references, heard[side]) for side in ("base", "fine_tune")}}
