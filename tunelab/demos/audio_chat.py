"""Audio chat assets: a tiny random-init Qwen2-Audio with a real Qwen2-Audio processor, and
chat rows that ask which numbers a clip speaks — all built offline in a few seconds.

The clips are the speech demo's (`speech_demo.speak`: number words spoken by espeak-ng in a
few voices, written at 22.05, 16 and 44.1 kHz, every fourth as flac), so every run decodes
and resamples as real data does; without espeak-ng the build stops with how to install it.
Each row is chat `messages` whose user turn holds the clip as an audio part (its path
relative to the data file) and a question, and whose assistant turn is the transcript.

The model is Qwen2-Audio's architecture at toy size: a one-layer audio encoder over 32 mel
bins with a 3-second window (its feature extractor's `chunk_length`; the encoder's
`max_source_positions` is half the window's frames, as the real model's 1500 is half of
30 s), a projector, and a two-layer Qwen2 language model; the processor is
`Qwen2AudioProcessor` with a `WhisperFeatureExtractor` and the demo's byte-level BPE
tokenizer carrying Qwen2-Audio's audio tokens, and Qwen2-Audio's own chat template.
Built once and cached under `<home>/cache/audio-chat-demo-v1` (or any folder given).
Heavy imports happen only inside the builders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tunelab.demos.assets import ModelDataAssets, chat_demo_config, ensure_built

AUDIO_CHAT_DEMO_VERSION = "audio-chat-demo-v1"
AUDIO_TOKENS = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|im_start|>", "<|im_end|>")
QUESTION = "Which numbers are spoken?"
N_CLIPS = 16
WINDOW_SECONDS = 3
MEL_BINS = 32
# The language model's init spread. At transformers' 0.02 the frozen output head of a model
# this narrow can only tilt the logits a little, and a LoRA run's loss falls for hundreds of
# steps; wider rows let the adapter's changes show within a few dozen.
TEXT_INIT_STD = 0.1


@dataclass(frozen=True)
class AudioChatDemoAssets(ModelDataAssets):
    @property
    def messages(self) -> Path:
        """Chat messages with an audio part (`{type: audio, path: clips/000.wav}`) and a question."""
        return self.data_dir / "messages.jsonl"


def chat_row(clip: str, transcript: str) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "audio", "path": clip}, {"type": "text", "text": QUESTION}]},
                         {"role": "assistant", "content": [{"type": "text", "text": transcript}]}]}


def _write_datasets(data_dir: Path) -> list[str]:
    """The clips and the messages file; returns the transcripts."""
    from tunelab.demos.speech import write_spoken_clips

    lines = [json.dumps(chat_row(name, text)) + "\n" for name, text in write_spoken_clips(data_dir, N_CLIPS, seed=7)]
    (data_dir / "messages.jsonl").write_text("".join(lines))
    return [json.loads(line)["messages"][1]["content"][0]["text"] for line in lines]


def _build_model(model_dir: Path, corpus: list[str]) -> None:
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration, Qwen2AudioProcessor, WhisperFeatureExtractor
    from transformers.utils import logging as hf_logging

    from tunelab.demos.assets import train_demo_tokenizer

    hf_logging.disable_progress_bar()
    corpus = corpus + [QUESTION, "system You are a helpful assistant.", "user assistant Audio 1:"] * 4
    tokenizer = train_demo_tokenizer(corpus, extra_special_tokens=AUDIO_TOKENS, vocab_size=320)
    tokenizer.eos_token = "<|im_end|>"  # where Qwen2-Audio's template ends every turn
    extractor = WhisperFeatureExtractor(feature_size=MEL_BINS, sampling_rate=16000, chunk_length=WINDOW_SECONDS)
    processor = Qwen2AudioProcessor(feature_extractor=extractor, tokenizer=tokenizer)  # Qwen2-Audio's own template
    tokenizer.chat_template = processor.chat_template  # text-only rows on this model render the same way
    config = Qwen2AudioConfig(
        audio_config={"model_type": "qwen2_audio_encoder", "d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
                      "encoder_ffn_dim": 64, "num_mel_bins": MEL_BINS, "max_source_positions": extractor.nb_max_frames // 2},
        text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                     "pad_token_id": tokenizer.pad_token_id, "initializer_range": TEXT_INIT_STD},
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"))
    torch.manual_seed(0)
    model = Qwen2AudioForConditionalGeneration(config)
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)


def _build(folder: Path) -> None:
    corpus = _write_datasets(folder / "data")
    _build_model(folder / "model", corpus)


def ensure_audio_chat_demo_assets(root: Path | None = None) -> AudioChatDemoAssets:
    """The audio chat assets, built on first use (cached under the home unless `root` is given)."""
    return AudioChatDemoAssets(ensure_built(root, AUDIO_CHAT_DEMO_VERSION, _build))


def audio_chat_demo_config(assets: AudioChatDemoAssets, *, steps: int = 60, data: Path | None = None, **overrides):
    """A LoRA run on the spoken-number chats with the loss on the replies only."""
    return chat_demo_config(assets, data or assets.messages, steps=steps, display_name="demo (audio chat)", **overrides)
