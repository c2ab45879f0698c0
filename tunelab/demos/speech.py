"""The speech demo: a tiny random-init Whisper with a real Whisper processor, and clips of
real (synthetic) speech whose transcripts it learns — all built offline in seconds.

The clips are spoken by `espeak-ng` (Debian's speech synthesiser; `scripts/install_system_deps.sh`
installs it, as `make install` and `make test` run it): short strings of number words
("seven three one"), each in one of a few English voices at a jittered speed and pitch,
with their transcript beside them. espeak-ng writes 22.05 kHz wav; a third of the clips
stay so, a third are resampled to 16 kHz and a third to 44.1 kHz (and every fourth is
flac), so every run decodes and resamples as real data does. Without espeak-ng the build
stops with how to install it (`MissingSynthesiser`): there is no silent fallback.

The model is Whisper's architecture at toy size (80 mel bins as Whisper's own, d_model
96, two encoder and two decoder layers) with a 3-second window instead of 30 (its
feature extractor's `chunk_length`), and a Whisper tokenizer assembled here: a byte-level
BPE trained on the transcripts plus Whisper's special tokens in Whisper's order
(<|endoftext|>, <|startoftranscript|>, the language tokens, <|translate|>, <|transcribe|>,
..., <|notimestamps|>), set to English transcription.

Built once and cached under `<home>/cache/speech-demo-v2` (or any folder given). Heavy
imports (numpy, soundfile, soxr, torch, transformers) happen only inside the builders.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tunelab.demos.assets import ModelDataAssets, ensure_built

SPEECH_DEMO_VERSION = "speech-demo-v2"
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# espeak-ng voices (all English): American, British, Scottish.
VOICES = ("en-us", "en", "en-gb-scotland")
SYNTH_RATE = 22050  # what espeak-ng writes
SAMPLE_RATES = (SYNTH_RATE, 16000, 44100)
WINDOW_SECONDS = 3  # the tiny Whisper's window (real Whisper: 30 s)
N_CLIPS = 96
# Clips whose word error rate the demo reports as it trains (the first of the training clips).
N_SCORED = 24
# The tiny Whisper's size: big enough to tell the voices' number words apart, small enough
# to learn them in a few minutes on two CPU cores.
MODEL_SIZE = {"d_model": 96, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
              "decoder_attention_heads": 4, "encoder_ffn_dim": 192, "decoder_ffn_dim": 192}
# Steps `tunelab demo --modality speech` trains: the word error rate falls clearly by then.
DEMO_STEPS = 250  # `tunelab demo --modality speech` without --steps
# The demo's own training recipe: a random-init encoder-decoder learns fastest trained whole.
SPEECH_DEMO_TRAINING = {"training_type": "full", "learning_rate": 1e-3, "batch_size": 8,
                        "gradient_accumulation_steps": 1, "warmup_steps": 5}
INSTALL_HINT = ("install it with `sudo apt-get install espeak-ng` (Debian/Ubuntu; `make install` runs "
                "scripts/install_system_deps.sh, which does) or `brew install espeak-ng` (macOS)")


class MissingSynthesiser(RuntimeError):
    """espeak-ng is not installed: the message says how to install it."""


@dataclass(frozen=True)
class SpeechDemoAssets(ModelDataAssets):
    @property
    def transcripts(self) -> Path:
        """`audio` (paths relative to this file) and `text` columns."""
        return self.data_dir / "transcripts.jsonl"

    @property
    def transcripts_csv(self) -> Path:
        """Its own column names: `file_name` (audio paths) and `sentence`."""
        return self.data_dir / "transcripts.csv"

    @property
    def scored(self) -> Path:
        """The first N_SCORED rows of `transcripts`: training clips the demo transcribes at each eval."""
        return self.data_dir / "scored.jsonl"


def espeak_binary() -> str:
    found = shutil.which("espeak-ng")
    if found is None:
        raise MissingSynthesiser(f"the speech demo speaks its clips with espeak-ng, which is not installed; {INSTALL_HINT}")
    return found


def speak(text: str, voice: str = "en-us", speed: int = 170, pitch: int = 50):
    """`text` spoken by espeak-ng: (mono float32 samples, their rate — 22.05 kHz)."""
    import soundfile

    binary = espeak_binary()
    with tempfile.TemporaryDirectory(prefix="tunelab-espeak-") as folder:
        wav = Path(folder) / "clip.wav"
        done = subprocess.run([binary, "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(wav), text],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0 or not wav.is_file():
            raise MissingSynthesiser(f"espeak-ng could not speak {text!r} (exit {done.returncode}: {done.stderr.strip()[:300]}); "
                                     f"reinstall it: {INSTALL_HINT}")
        samples, rate = soundfile.read(wav, dtype="float32")
    return samples, rate


def write_clip(path: Path, samples, source_rate: int, rate: int) -> None:
    """Write the samples at `rate` (resampled by soxr when it differs); the suffix picks wav or flac."""
    import soundfile
    import soxr

    if rate != source_rate:
        samples = soxr.resample(samples, source_rate, rate)
    soundfile.write(path, samples, rate)


def spoken_rows(n: int, seed: int) -> list[tuple[str, str, int, int]]:
    """n (transcript, voice, speed, pitch) draws: 2 to 4 number words in a random voice."""
    rng = random.Random(seed)
    return [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 4))), rng.choice(VOICES),
             rng.randint(150, 200), rng.randint(35, 65)) for _ in range(n)]


def write_spoken_clips(data_dir: Path, n: int, seed: int) -> list[tuple[str, str]]:
    """n spoken clips under `data_dir/clips` (every fourth flac, the rates taking turns);
    returns (path relative to `data_dir`, transcript) pairs."""
    from concurrent.futures import ThreadPoolExecutor

    (data_dir / "clips").mkdir(parents=True, exist_ok=True)
    drawn = spoken_rows(n, seed=seed)
    # espeak-ng runs as its own process per clip: a few at once hide its start-up time.
    with ThreadPoolExecutor(max_workers=4) as pool:
        spoken = list(pool.map(lambda row: speak(*row), drawn))
    rows = []
    for i, ((text, *_), (samples, source_rate)) in enumerate(zip(drawn, spoken)):
        name = f"clips/{i:03d}.{'flac' if i % 4 == 3 else 'wav'}"
        write_clip(data_dir / name, samples, source_rate, SAMPLE_RATES[i % len(SAMPLE_RATES)])
        rows.append((name, text))
    return rows


def _write_datasets(data_dir: Path) -> list[str]:
    """The clips and the data files; returns the transcripts."""
    rows = write_spoken_clips(data_dir, N_CLIPS, seed=5)
    lines = [json.dumps({"audio": name, "text": text}) + "\n" for name, text in rows]
    (data_dir / "transcripts.jsonl").write_text("".join(lines))
    (data_dir / "scored.jsonl").write_text("".join(lines[:N_SCORED]))
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
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=80, **MODEL_SIZE,
                           max_source_positions=frames // 2, max_target_positions=64, decoder_start_token_id=start,
                           pad_token_id=end, bos_token_id=end, eos_token_id=end, suppress_tokens=[], begin_suppress_tokens=[end])
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    # Whisper's init (normal, std 0.02) leaves the convolutions' output ten times weaker than
    # the positional embedding they are added to: the decoder then learns the transcripts'
    # word statistics and ignores the sound (WER stuck near 0.8). He init gives the sound
    # the same scale, and the model listens within a hundred steps.
    for conv in (model.model.encoder.conv1, model.model.encoder.conv2):
        torch.nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
        torch.nn.init.zeros_(conv.bias)
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


def speech_demo_config(assets: SpeechDemoAssets, *, steps: int = DEMO_STEPS, data: Path | None = None, **overrides):
    """A run on the spoken clips that visibly learns their transcripts: every 50 steps the
    first N_SCORED training clips are transcribed, so the word error rate shows beside the loss."""
    from tunelab.config.run_config import parse_config

    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(data or assets.transcripts)],
        "local_eval_datasets": [str(assets.scored)],
        **SPEECH_DEMO_TRAINING,
        "backend": "torch",
        "max_steps": steps,
        "eval_steps": 50,
        "display_name": "demo (speech)",
        **overrides,
    })


def demo_speech_assets() -> SpeechDemoAssets:
    """The spoken clips for `tunelab demo` (the speech demo and the text-to-speech ones): a
    missing espeak-ng is refused naming --modality."""
    from tunelab.config.run_config import ConfigError

    try:
        return ensure_speech_demo_assets()
    except MissingSynthesiser as exc:
        raise ConfigError.single("--modality", str(exc)) from exc


def demo_run_config(steps: int, backend: str, method: str):
    """`tunelab demo --modality speech` (the speech spec's `demo_builder`)."""
    return speech_demo_config(demo_speech_assets(), steps=steps)


def print_demo_evals(outcome, console) -> None:
    """The word error rate, first eval against last."""
    from tunelab.demos.embedding import eval_history

    evals = eval_history(outcome.run.get("output_dir"), "eval_wer")
    if evals:
        console.print(f"WER:        {evals[0][1]:.3f} (step {evals[0][0]}) -> {evals[-1][1]:.3f} (step {evals[-1][0]}) "
                      f"on {N_SCORED} of the training clips")
