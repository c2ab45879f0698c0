"""The Sesame CSM demo: a tiny random-init `CsmForConditionalGeneration` with a tiny random-init
Mimi codec inside it and its `CsmProcessor`, trained on the speech demo's clips — built offline in seconds.

The clips and their words are the speech demo's (`speech_demo.ensure_speech_demo_assets`).
The model is transformers' own CSM at a toy size: a two-layer backbone and a one-layer depth
decoder over 4 codebooks of 64 codes, its codec Mimi at 24 kHz (12.5 frames a second) with
4 quantizers and one small transformer layer, its codebooks seeded from a few of the clips
(`_seed_codebooks`: Mimi's start at zero, which would code every frame as the end of audio). Its tokenizer is the demo's byte-level BPE
trained on the transcripts, with CSM's `<|AUDIO|>` and `<|audio_eos|>` tokens and a
post-processor that wraps text in <s> ... <|end|> (as CSM's own tokenizer wraps it in its
begin and end of text); its feature extractor is Encodec's at the codec's rate. Built once
and cached under `<home>/cache/csm-demo-v1`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tunelab.demos.assets import ModelAssets, ensure_built
from tunelab.demos.tts import speaking_demo_config

CSM_DEMO_VERSION = "csm-demo-v1"
CODEBOOKS = 4
CODEBOOK_SIZE = 64
RATE = 24000
AUDIO_TOKENS = ("<|AUDIO|>", "<|audio_eos|>")  # the tokens CsmProcessor looks for


@dataclass(frozen=True)
class CsmDemoAssets(ModelAssets):
    """The CSM demo's built folder."""


def _tokenizer(corpus: list[str]):
    from tokenizers import processors

    from tunelab.demos.assets import SPECIAL_TOKENS, train_demo_tokenizer

    tokenizer = train_demo_tokenizer(corpus, AUDIO_TOKENS, vocab_size=len(SPECIAL_TOKENS) + len(AUDIO_TOKENS) + 256 + 60)
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, tokenizer.bos_token_id), (eos, tokenizer.eos_token_id)])
    tokenizer.chat_template = None  # the text demo's chat template is not CSM's
    return tokenizer


def _build(folder: Path, transcripts: Path) -> None:
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration, CsmProcessor, EncodecFeatureExtractor, MimiConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    corpus = [json.loads(line)["text"] for line in transcripts.read_text().splitlines() if line.strip()]
    tokenizer = _tokenizer(corpus)
    audio, audio_eos = tokenizer.convert_tokens_to_ids(list(AUDIO_TOKENS))
    codec = MimiConfig(sampling_rate=RATE, hidden_size=32, num_filters=8, num_hidden_layers=1, intermediate_size=64,
                       num_attention_heads=2, num_key_value_heads=2, codebook_size=CODEBOOK_SIZE, codebook_dim=16,
                       num_quantizers=CODEBOOKS, num_semantic_quantizers=1, vector_quantization_hidden_dimension=16, upsample_groups=32)
    # CSM's codebook vocabulary: the codec's codes and three more (its pad is the last).
    vocab = CODEBOOK_SIZE + 3
    config = CsmConfig(num_codebooks=CODEBOOKS, vocab_size=vocab, text_vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                       pad_token_id=tokenizer.pad_token_id, codebook_pad_token_id=vocab - 1, codebook_eos_token_id=0,
                       bos_token_id=tokenizer.bos_token_id, audio_token_id=audio, audio_eos_token_id=audio_eos,
                       depth_decoder_config={"num_codebooks": CODEBOOKS, "backbone_hidden_size": 64, "vocab_size": vocab, "hidden_size": 64,
                                             "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
                                             "num_key_value_heads": 4, "max_position_embeddings": CODEBOOKS + 1},
                       codec_config=codec.to_dict())
    torch.manual_seed(0)
    model = CsmForConditionalGeneration(config)
    _seed_codebooks(model.codec_model, [transcripts.parent / json.loads(line)["audio"] for line in transcripts.read_text().splitlines()[:12]])
    model_dir = folder / "model"
    model.save_pretrained(model_dir)
    CsmProcessor(EncodecFeatureExtractor(feature_size=1, sampling_rate=RATE), tokenizer).save_pretrained(model_dir)


def _seed_codebooks(codec, clips: list[Path]) -> None:
    """Mimi's codebooks start at zero (its checkpoints carry trained ones), so a random-init
    Mimi gives every frame code 0 — CSM's end-of-audio frame. Each codebook's centroids are
    drawn instead from what it is given to quantize on a few demo clips, stage after stage
    of each residual quantizer (as k-means starts), so the clips encode to varied codes."""
    import torch

    from tunelab.worker.families.speech.collator import decode_clip

    seen = []
    encode = codec.quantizer.encode
    codec.quantizer.encode = lambda embeddings, num_quantizers=None: seen.append(embeddings) or encode(embeddings, num_quantizers)
    with torch.no_grad():
        for clip in clips:
            codec.encode(torch.from_numpy(decode_clip({"path": str(clip), "bytes": None}, RATE)).view(1, 1, -1))
        del codec.quantizer.encode  # the class's own method again
        quantizer = codec.quantizer
        for stage in (quantizer.semantic_residual_vector_quantizer, quantizer.acoustic_residual_vector_quantizer):
            residual = torch.cat([stage.input_proj(e) if stage.input_proj is not None else e for e in seen], dim=-1)
            for layer in stage.layers:
                vectors = residual.transpose(1, 2).reshape(-1, residual.shape[1])
                picked = vectors[torch.randint(len(vectors), (CODEBOOK_SIZE,))]
                layer.codebook.embed_sum.copy_(picked + 1e-3 * torch.randn_like(picked))
                layer.codebook._embed = None  # recomputed from embed_sum
                residual = residual - layer.decode(layer.encode(residual))


def ensure_csm_demo_assets(transcripts: Path, root: Path | None = None) -> CsmDemoAssets:
    """The CSM demo's model and processor, built on first use (cached under the home unless `root` is given)."""
    return CsmDemoAssets(ensure_built(root, CSM_DEMO_VERSION, lambda folder: _build(folder, transcripts)))


def csm_demo_config(assets: CsmDemoAssets, data: Path, *, steps: int = 60, **overrides):
    """CSM's run: the codec-token LM's recipe and checks (`tts_demo.speaking_demo_config`)."""
    return speaking_demo_config(assets, data, steps=steps, display_name="demo (text-to-speech, CSM)", **overrides)


def demo_run_config(steps: int, backend: str, method: str):
    """`tunelab demo --modality tts --tts-family csm` (the csm spec's `demo_builder`): the speech demo's clips."""
    from tunelab.demos.speech import demo_speech_assets

    clips = demo_speech_assets().transcripts
    return csm_demo_config(ensure_csm_demo_assets(clips), clips, steps=steps)
