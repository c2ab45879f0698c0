"""The SNAC audio codec of a text-to-speech run: load it, encode clips to codes, decode codes to sound.

A codec is a folder with SNAC's `config.json` and `pytorch_model.bin` (what the `snac`
package saves and loads) or a hub repo holding them. Which one: the run's `tts_codec`;
without it the model folder's `codec/` subfolder (tunelab saves one beside every TTS
model it trains and exports), else Orpheus's own codec, `hubertsiuzdak/snac_24khz`.
Orpheus's layout needs SNAC with three codebooks at strides 4, 2, 1; any other codec is
refused naming the field. `fingerprint` is a hash of the codec's two files: the codec
cache's key holds it, so a different codec never reuses another's codes.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunelab.run_facts import CODEC_FILES, CODEC_SUBFOLDER  # noqa: F401 (the family saves into CODEC_SUBFOLDER)
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

ORPHEUS_CODEC = "hubertsiuzdak/snac_24khz"


@dataclass
class Codec:
    model: Any  # snac.SNAC, in eval mode on the CPU
    folder: Path
    fingerprint: str

    @property
    def rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def codebook_size(self) -> int:
        return int(self.model.codebook_size)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def encode(self, samples: np.ndarray) -> tuple[list[int], list[int], list[int]]:
        """Mono float32 samples at `rate` Hz -> the coarse, mid and fine code lists."""
        import torch

        audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).view(1, 1, -1).to(self.device)
        with torch.inference_mode(), _cpu_threads(self.device, 1):
            codes = self.model.encode(audio)
        return tuple(level[0].tolist() for level in codes)  # type: ignore[return-value]

    def decode(self, coarse: list[int], mid: list[int], fine: list[int]) -> np.ndarray:
        import torch

        codes = [torch.tensor([level], dtype=torch.long, device=self.device) for level in (coarse, mid, fine)]
        with torch.inference_mode(), _cpu_threads(self.device, 1):
            audio = self.model.decode(codes)
        return audio.reshape(-1).float().cpu().numpy()

    def save(self, dest: Path) -> None:
        """The codec's files into `dest` (what decodes this model's tokens back to sound)."""
        dest.mkdir(parents=True, exist_ok=True)
        for name in CODEC_FILES:
            shutil.copyfile(self.folder / name, dest / name)


@contextmanager
def _cpu_threads(device: Any, count: int) -> Iterator[None]:
    """One clip is too little work to share between threads: on the CPU the codec runs on
    one, since on busy shared cores the threads' waiting costs far more than they save
    (the demo codec: 0.25 s a clip on one thread, 7 s on two, with both cores loaded)."""
    import torch

    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def codec_source(config: WorkerConfig) -> str:
    explicit = config.tts_codec
    if explicit:
        return str(explicit)
    beside = Path(config.model_name).expanduser() / CODEC_SUBFOLDER
    return str(beside) if (beside / "config.json").is_file() else ORPHEUS_CODEC


def _local_folder(source: str, config: WorkerConfig) -> Path:
    folder = Path(source).expanduser()
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(source, allow_patterns=list(CODEC_FILES), token=config.hf_token or None))


def load_codec(config: WorkerConfig, cuda: bool = False) -> Codec:
    """The run's codec, on the GPU when the run has one (encoding every clip is its heaviest use)."""
    source = codec_source(config)
    try:
        from snac import SNAC

        folder = _local_folder(source, config)
        missing = [name for name in CODEC_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}")
        model = SNAC.from_pretrained(str(folder)).eval()
    except Exception as exc:
        raise RunSettingError("tts_codec", f"the SNAC codec {source} does not load ({exc}); set tts_codec to a folder with SNAC's "
                                           "config.json and pytorch_model.bin, or a hub repo that has them") from exc
    if list(model.vq_strides) != [4, 2, 1]:
        raise RunSettingError("tts_codec", f"the codec {source} has {len(model.vq_strides)} codebooks at strides {list(model.vq_strides)}; "
                                           "Orpheus's layout needs SNAC's three codebooks at strides 4, 2, 1 (e.g. hubertsiuzdak/snac_24khz)")
    digest = hashlib.sha256()
    for name in CODEC_FILES:
        digest.update((folder / name).read_bytes())
    return Codec(model.cuda() if cuda else model, folder, digest.hexdigest())


def build_random_codec(dest: Path, *, rate: int = 16000, codebook_size: int = 64, seed: int = 0) -> None:
    """A tiny random-init SNAC (three codebooks, strides 4, 2, 1) saved as a codec folder:
    the demo's and the tests' codec, built offline in a moment."""
    import json

    import torch
    from snac import SNAC

    settings = dict(sampling_rate=rate, encoder_dim=8, encoder_rates=[2, 4, 8, 8], decoder_dim=32, decoder_rates=[8, 8, 4, 2],
                    attn_window_size=None, codebook_size=codebook_size, codebook_dim=4, vq_strides=[4, 2, 1],
                    noise=True, depthwise=True)
    torch.manual_seed(seed)
    model = SNAC(**settings)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(settings, indent=2))
    torch.save(model.state_dict(), dest / "pytorch_model.bin")
