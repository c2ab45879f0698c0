"""The speech demo: a tiny random-init Whisper with a real Whisper processor, and generated
clips whose transcripts can be learnt from the sound — all built offline in seconds.

Each clip is a sequence of tones, one pitch per word of a small vocabulary ("one" is
300 Hz, "two" 450 Hz ...), with jittered lengths, loudness and a little noise; its
transcript is those words. The clips are written at 16, 22.05 and 44.1 kHz, as wav and
flac, so every run decodes and resamples like real data does. The model is Whisper's
architecture at toy size (80 mel bins as Whisper's own, d_model 64, two encoder and two
decoder layers) with a 2-second window instead of 30 (its feature extractor's
`chunk_length`), and a Whisper tokenizer assembled here: a byte-level BPE trained on the
transcripts plus Whisper's special tokens in Whisper's order (<|endoftext|>,
<|startoftranscript|>, the language tokens, <|translate|>, <|transcribe|>, ...,
<|notimestamps|>), set to English transcription.

Built once and cached under `<home>/cache/speech-demo-v1` (or any folder given). Heavy
imports (numpy, soundfile, torch, transformers) happen only inside the builders.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tunelab.demo_assets import ensure_built

SPEECH_DEMO_VERSION = "speech-demo-v1"
WORD_PITCHES = {"one": 300.0, "two": 450.0, "three": 650.0, "four": 900.0,
                "five": 1250.0, "six": 1700.0, "seven": 2300.0, "eight": 3100.0}
SAMPLE_RATES = (16000, 22050, 44100)
WINDOW_SECONDS = 2  # the tiny Whisper's window (real Whisper: 30 s)
N_CLIPS = 96
# The demo's own training recipe: a random-init encoder-decoder learns fastest trained whole.
SPEECH_DEMO_TRAINING = {"training_type": "full", "learning_rate": 8e-3, "batch_size": 8,
                        "gradient_accumulation_steps": 1, "warmup_steps": 5}


@dataclass(frozen=True)
class SpeechDemoAssets:
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def transcripts(self) -> Path:
        """`audio` (paths relative to this file) and `text` columns."""
        return self.data_dir / "transcripts.jsonl"

    @property
    def transcripts_csv(self) -> Path:
        """Its own column names: `file_name` (audio paths) and `sentence`."""
        return self.data_dir / "transcripts.csv"


def tone_clip(words: list[str], rate: int, rng: random.Random):
    """The words as tones (one pitch each, faded in and out, short gaps), float32 samples."""
    import numpy as np

    pieces = [np.zeros(int(rate * rng.uniform(0.03, 0.08)), dtype=np.float32)]
    for word in words:
        seconds = rng.uniform(0.15, 0.25)
        t = np.arange(int(rate * seconds)) / rate
        tone = np.sin(2 * np.pi * WORD_PITCHES[word] * t + rng.uniform(0, np.pi)) * rng.uniform(0.3, 0.8)
        fade = np.minimum(1.0, np.minimum(t, seconds - t) / 0.01)
        pieces += [(tone * fade).astype(np.float32), np.zeros(int(rate * rng.uniform(0.04, 0.08)), dtype=np.float32)]
    clip = np.concatenate(pieces)
    return clip + np.random.default_rng(rng.randrange(2**31)).normal(0, 0.01, len(clip)).astype(np.float32)


def _write_datasets(data_dir: Path) -> list[str]:
    """The clips and the two data files; returns the transcripts."""
    import soundfile

    (data_dir / "clips").mkdir(parents=True, exist_ok=True)
    rng = random.Random(5)
    rows = []
    for i in range(N_CLIPS):
        words = [rng.choice(list(WORD_PITCHES)) for _ in range(rng.randint(2, 4))]
        rate = SAMPLE_RATES[i % len(SAMPLE_RATES)]
        name = f"clips/{i:03d}.{'flac' if i % 4 == 3 else 'wav'}"
        soundfile.write(data_dir / name, tone_clip(words, rate, rng), rate)
        rows.append((name, " ".join(words)))
    with open(data_dir / "transcripts.jsonl", "w") as f:
        for name, text in rows:
            f.write(json.dumps({"audio": name, "text": text}) + "\n")
    with open(data_dir / "transcripts.csv", "w") as f:
        f.write("file_name,sentence\n" + "".join(f"{name},{text}\n" for name, text in rows))
    return [text for _, text in rows]


def whisper_special_tokens() -> list[str]:
    """Whisper's special tokens in Whisper's order: the tokenizer finds a language's token
    as <|startoftranscript|>'s id + 1 + the language's place in this list."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return (["<|endoftext|>", "<|startoftranscript|>"] + [f"<|{code}|>" for code in LANGUAGES]
            + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"])


def build_whisper_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    specials = whisper_special_tokens()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=len(specials) + 256 + 40, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(corpus, trainer=trainer)
    trained = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tokenizer = WhisperTokenizer(vocab=trained["vocab"], merges=merges, language="en", task="transcribe",
                                 extra_special_tokens=specials[1:])
    tokenizer.model_max_length = 64
    return tokenizer


def _build_model(model_dir: Path, corpus: list[str]) -> None:
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperProcessor
    from transformers.models.whisper.tokenization_whisper import LANGUAGES
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = build_whisper_tokenizer(corpus + [" " + text for text in corpus])
    ids = tokenizer.convert_tokens_to_ids
    end, start = tokenizer.eos_token_id, ids("<|startoftranscript|>")
    frames = WINDOW_SECONDS * 100  # 10 ms hops; the encoder's two convolutions halve them
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           max_source_positions=frames // 2, max_target_positions=64, decoder_start_token_id=start,
                           pad_token_id=end, bos_token_id=end, eos_token_id=end, suppress_tokens=[], begin_suppress_tokens=[end])
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    # What Whisper's generate reads to start a transcript as the labels do: <|en|><|transcribe|><|notimestamps|>.
    model.generation_config = GenerationConfig(
        decoder_start_token_id=start, bos_token_id=end, eos_token_id=end, pad_token_id=end, max_length=64,
        begin_suppress_tokens=[end], suppress_tokens=[], is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"))
    extractor = WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, chunk_length=WINDOW_SECONDS)
    model.save_pretrained(model_dir)
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(model_dir)


def _build(folder: Path) -> None:
    corpus = _write_datasets(folder / "data")
    _build_model(folder / "model", corpus)


def ensure_speech_demo_assets(root: Path | None = None) -> SpeechDemoAssets:
    """The speech demo assets, built on first use (cached under the home unless `root` is given)."""
    return SpeechDemoAssets(ensure_built(root, SPEECH_DEMO_VERSION, _build))


def speech_demo_config(assets: SpeechDemoAssets, *, steps: int = 60, data: Path | None = None, **overrides):
    """A run on the tone clips that visibly learns their transcripts; a tenth of the clips
    is held out and transcribed every 20 steps, so the word error rate shows beside the loss."""
    from tunelab.config import parse_config

    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(data or assets.transcripts)],
        **SPEECH_DEMO_TRAINING,
        "backend": "torch",
        "max_steps": steps,
        "eval_steps": 20,
        "eval_holdout": 0.1,
        "display_name": "demo (speech)",
        **overrides,
    })
