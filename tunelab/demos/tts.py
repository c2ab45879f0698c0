"""The text-to-speech demo: a tiny random-init Orpheus-style Llama and a tiny random-init SNAC
codec, trained on the speech demo's clips — built offline in seconds.

The clips and their words are the speech demo's (`speech_demo.ensure_speech_demo_assets`:
whatever that demo speaks, this one learns to say). The model is the text demo's Llama at
the same toy size, its byte-level BPE trained on the transcripts, with Orpheus's layout
tokens added (`tts_layout`: seven control tokens and 7 x 64 audio tokens) and the
`tunelab_tts` marker in its config; its codec (`codec/` in the model folder, where the
worker looks for it) is SNAC with three codebooks of 64 codes at 16 kHz
(`tts_codec.build_random_codec`). Built once and cached under `<home>/cache/tts-demo-v1`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tunelab.demos.assets import ModelAssets, ensure_built

TTS_DEMO_VERSION = "tts-demo-v1"
CODEBOOK_SIZE = 64
# A random-init LM (codec-token Llama or CSM) learns the codec's tokens fastest trained whole.
TTS_DEMO_TRAINING = {"training_type": "full", "learning_rate": 3e-3, "batch_size": 8,
                     "gradient_accumulation_steps": 1, "warmup_steps": 5, "max_seq_length": 512}


@dataclass(frozen=True)
class TtsDemoAssets(ModelAssets):
    """The codec-token LM demo's built folder."""


def _build(folder: Path, transcripts: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    from tunelab.demos.assets import SPECIAL_TOKENS, train_demo_tokenizer
    from tunelab.worker.families.tts.codec import CODEC_SUBFOLDER, build_random_codec
    from tunelab.worker.families.tts.layout import MARKER, layout_tokens

    hf_logging.disable_progress_bar()
    corpus = [json.loads(line)["text"] for line in transcripts.read_text().splitlines() if line.strip()]
    added = layout_tokens(CODEBOOK_SIZE)
    tokenizer = train_demo_tokenizer(corpus, tuple(added), vocab_size=len(SPECIAL_TOKENS) + len(added) + 256 + 60)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=False)
    setattr(config, MARKER, {"codec": "snac", "codebook_size": CODEBOOK_SIZE})
    model_dir = folder / "model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    build_random_codec(model_dir / CODEC_SUBFOLDER, codebook_size=CODEBOOK_SIZE)


def ensure_tts_demo_assets(transcripts: Path, root: Path | None = None) -> TtsDemoAssets:
    """The TTS demo's model and codec, built on first use (cached under the home unless `root` is given)."""
    return TtsDemoAssets(ensure_built(root, TTS_DEMO_VERSION, lambda folder: _build(folder, transcripts)))


def speaking_demo_config(assets: ModelAssets, data: Path, *, steps: int, display_name: str, **overrides):
    """A run on the speech demo's clips whose loss visibly falls (the text-to-speech demos:
    codec-token LM and CSM); a tenth of the clips is held out, and every 20 steps the eval
    loss is measured and one sentence is spoken into samples/step-N.wav (the page plays it)."""
    from tunelab.config.run_config import parse_config

    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(data)],
        **TTS_DEMO_TRAINING,
        "backend": "torch",
        "max_steps": steps,
        "eval_steps": 20,
        "eval_holdout": 0.1,
        "display_name": display_name,
        **overrides,
    })


def tts_demo_config(assets: TtsDemoAssets, data: Path, *, steps: int = 60, **overrides):
    """The codec-token LM's run (`speaking_demo_config`)."""
    return speaking_demo_config(assets, data, steps=steps, display_name="demo (text-to-speech)", **overrides)


def demo_run_config(steps: int, backend: str, method: str):
    """`tunelab demo --modality tts` (the tts spec's `demo_builder`): speaking the speech demo's clips."""
    from tunelab.demos.speech import demo_speech_assets

    clips = demo_speech_assets().transcripts
    return tts_demo_config(ensure_tts_demo_assets(clips), clips, steps=steps)
