"""Model families: the few steps where text, vision-language, embedding and speech-to-text models differ.

The torch backend runs one sequence of stages for every run; a family supplies what
depends on the kind of model — how it and its processing class load, how the data
becomes batches, which layers an adapter targets, which trainer trains it and how the
result is saved. `detect(config)` picks the family from the model's own files
(`speech_model.is_speech_model`, `vision_model.is_vision_model`,
`embedding_model.is_embedding_model`), never from its name.
  text    tokenizer + AutoModelForCausalLM; data through `data.prepare` and TRL's collator.
  vision  AutoProcessor + AutoModelForImageTextToText; image rows through
          `vision_data.prepare` and its collator. A dataset without images (no image column,
          no image parts in its conversations) trains the model as a language model,
          exactly as the text family would.
  embedding  a sentence-transformers model (`embedding_family`): pair/triplet/scored rows,
          sentence-transformers' own trainer and losses; saved as a sentence-transformers folder.
  speech  AutoProcessor (feature extractor + tokenizer) + AutoModelForSpeechSeq2Seq;
          audio + transcript rows through `speech_data.prepare` and its collator (the
          transcripts' language settled first: `speech_prefix`), and
          transformers' Seq2SeqTrainer with word error rate at eval (`speech_trainer`).
  tts     an Orpheus-style causal LM over SNAC codec tokens (`tts_family`, told apart by
          `tts_model.is_tts_model`), or Sesame CSM over its own Mimi codec (`csm_family`,
          `tts_model.is_csm_model`): text + audio rows to codec tokens, a spoken sample per eval.
  audio_chat  a language model that listens (Qwen2-Audio; `audio_chat_family`, told apart by
          `audio_chat_model.is_audio_chat_model`): chat with audio parts, trained like vision.
`modality(raw)` names what the run trains on (events.MODALITIES), for the run's record.
`wrap` is the same for text and vision: the method's adapter on the family's targets, or full
fine-tuning with what the switches turn off frozen; both train with TRL's SFTTrainer.
The processing class (tokenizer or processor) is what the trainer gets and what is saved
next to the weights, so a finished run reloads with AutoTokenizer / AutoProcessor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tunelab.worker import lora_targets, model_setup

from tunelab.worker.data import prepare as data


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    processing: Any  # the tokenizer, or the processor that holds it


class _Family:
    # Whether its SFT batches may go padding-free on a CPU (rows of token ids only; the
    # families with their own collators, or with 3-D position ids, keep padding).
    padding_free_on_cpu = False
    # Whether its data needs only the tokenizer, so the backend may prepare it while the
    # model loads (`load_tokenizer` first, then `load` reuses that tokenizer).
    prefetches_data = False

    def targets(self, model: Any, config: dict[str, Any]) -> list[str] | None:
        raise NotImplementedError

    def wrap(self, model: Any, config: dict[str, Any], device: Any) -> Any:
        """The model ready to train: an adapter on the family's targets, or every weight the
        switches leave on for full fine-tuning."""
        model = model_setup.wrap_for_training(model, config, device, self.targets(model, config))
        if config.training_type not in ("lora", "qlora") and not lora_targets.switches_at_default(config):
            lora_targets.freeze_switched_off(model, config)
        return model

    def build_trainer(self, config: dict[str, Any], device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.text.sft_trainer import build_sft_trainer

        padding_free = self.padding_free_on_cpu and model_setup.padding_free_batches(config, device)
        return build_sft_trainer(config, device, model, loaded.processing, prepared, output_dir, callbacks, padding_free)

    def save_final(self, trainer: Any, loaded: Loaded, output_dir: Any) -> None:
        trainer.save_model(str(output_dir))  # every rank takes part (FSDP gathers); the Trainer writes from one
        if trainer.args.should_save:
            loaded.processing.save_pretrained(str(output_dir))  # the tokenizer, or the whole processor


class TextFamily(_Family):
    name = "text"
    padding_free_on_cpu = True
    _tokenizer: Any = None

    @property
    def prefetches_data(self) -> bool:  # type: ignore[override]
        # Only where the rows are prepared as here: a subclass with its own `prepare`
        # (text-to-speech, over codec tokens) needs its model before its data.
        return type(self).prepare is TextFamily.prepare

    def load_tokenizer(self, config: dict[str, Any]) -> Any:
        self._tokenizer = model_setup.load_tokenizer(config)
        return self._tokenizer

    def load(self, config: dict[str, Any], device: Any) -> Loaded:
        tokenizer = self._tokenizer or self.load_tokenizer(config)
        padding_free = model_setup.padding_free_batches(config, device)
        return Loaded(model_setup.load_model(config, device, padding_free=padding_free), tokenizer, tokenizer)

    def prepare(self, config: dict[str, Any], loaded: Loaded, raw: Any) -> data.PreparedData:
        return data.prepare(config, loaded.tokenizer, raw)

    def modality(self, raw: Any) -> str:
        return "text"

    def targets(self, model: Any, config: dict[str, Any]) -> list[str] | None:
        # At their defaults the switches leave the text path's own default targets.
        return None if lora_targets.switches_at_default(config) else lora_targets.select_targets(model, config)


class VisionFamily(_Family):
    name = "vision"

    def load(self, config: dict[str, Any], device: Any) -> Loaded:
        from tunelab.worker.families.vision import model as vision_model

        processor = vision_model.load_processor(config)
        model = model_setup.load_model(config, device, vision_model.model_class())
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: dict[str, Any], loaded: Loaded, raw: Any) -> data.PreparedData:
        from tunelab.worker.families.vision import data as vision_data

        if not vision_data.has_images(raw):
            vision_data.refuse_placeholders_without_images(raw)
            return data.prepare(config, loaded.tokenizer, raw)
        return vision_data.prepare(config, loaded.processing, raw)

    def modality(self, raw: Any) -> str:
        """What the run trains on: image rows (an image column or image parts) make it "vision";
        without them it is a language model."""
        from tunelab.worker.families.vision import data as vision_data

        return "vision" if vision_data.has_images(raw) else "text"

    def targets(self, model: Any, config: dict[str, Any]) -> list[str] | None:
        return lora_targets.select_targets(model, config)


class SpeechFamily(_Family):
    name = "speech"

    def load(self, config: dict[str, Any], device: Any) -> Loaded:
        from tunelab.worker.families.speech import model as speech_model

        speech_model.check_trainable(config)
        processor = speech_model.load_processor(config)
        model = model_setup.load_model(config, device, speech_model.model_class())
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: dict[str, Any], loaded: Loaded, raw: Any) -> data.PreparedData:
        from tunelab.worker.families.speech import data as speech_data

        # The transcripts' language first: the labels are written with its prefix.
        from tunelab.worker.families.speech import prefix as speech_prefix

        # The transcripts' language first: the labels are written with its prefix.
        note = speech_prefix.settle(config, loaded.model, loaded.processing, raw)
        prepared = speech_data.prepare(config, loaded.processing, raw, loaded.model.config)
        prepared.notes[:0] = [note] if note else []
        return prepared

    def modality(self, raw: Any) -> str:
        return "speech"

    def targets(self, model: Any, config: dict[str, Any]) -> list[str] | None:
        # Every linear layer of the encoder and the decoder; the output head stays as it is.
        return sorted(lora_targets.classify_linear_layers(model))

    def wrap(self, model: Any, config: dict[str, Any], device: Any) -> Any:
        # The finetune_* switches speak of vision and language parts: nothing here to switch.
        # PEFT's plain wrapper: its SEQ_2_SEQ_LM one passes input_ids, which a speech encoder does not take.
        return model_setup.wrap_for_training(model, config, device, self.targets(model, config), task_type=None)

    def build_trainer(self, config: dict[str, Any], device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.speech.trainer import build_speech_trainer

        return build_speech_trainer(config, device, model, loaded.processing, prepared, output_dir, callbacks)


def detect(config: dict[str, Any]) -> Any:
    """The run's family: speech-to-text, text-to-speech, audio chat, vision-language, embedding, or (otherwise) text."""
    from tunelab.worker.families.embedding import model as embedding_model
    from tunelab.worker.families.speech import model as speech_model
    from tunelab.worker.families.vision import model as vision_model

    if speech_model.is_speech_model(config):
        return SpeechFamily()
    from tunelab.worker.families.tts import model as tts_model

    if tts_model.is_csm_model(config):
        from tunelab.worker.families.csm.family import CsmFamily

        return CsmFamily()
    if tts_model.is_tts_model(config):
        from tunelab.worker.families.tts.family import TtsFamily

        return TtsFamily()
    from tunelab.worker.families.audio_chat import model as audio_chat_model

    if audio_chat_model.is_audio_chat_model(config):  # before vision: no vision sub-config, but a processor like one
        from tunelab.worker.families.audio_chat.family import AudioChatFamily

        return AudioChatFamily()
    if vision_model.is_vision_model(config):
        return VisionFamily()
    if embedding_model.is_embedding_model(config):
        from tunelab.worker.families.embedding.family import EmbeddingFamily

        return EmbeddingFamily()
    return TextFamily()
