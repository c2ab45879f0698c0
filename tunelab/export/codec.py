"""What a text-to-speech export carries besides the weights: the codec that turns its tokens into sound.

A TTS run keeps its SNAC codec as `codec/` in its folder (`worker.tts_family`); a
checkpoint's run folder is its parent. `carry_codec` copies it into the export and adds a
README line saying how to decode. A model whose family carries its codec inside its weights
(its spec's `export_note`) gets that README line saying how it speaks (`note_builtin_codec`).
Anything else exports nothing extra. Torch-free.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tunelab import families
from tunelab.run_facts import CODEC_FILES, CODEC_SUBFOLDER

README_LINE = ("Text-to-speech model (Orpheus's layout over SNAC codes, exported by tunelab). `codec/` is the SNAC codec "
               "that turns its audio tokens back into sound: `snac.SNAC.from_pretrained('codec')`. Token `<custom_token_N>` "
               "with N >= 10 is code (N - 10) % K at place (N - 10) // K of a 7-token frame (K: config.json's "
               "tunelab_tts.codebook_size, 4096 for Orpheus).\n")


def codec_beside(source: Path) -> Path | None:
    """The `codec/` folder of a run folder or of a checkpoint's run folder, or None."""
    return next((folder / CODEC_SUBFOLDER for folder in (Path(source), Path(source).parent)
                 if all((folder / CODEC_SUBFOLDER / name).is_file() for name in CODEC_FILES)), None)


def carry_codec(source: Path, dest: Path) -> bool:
    found = codec_beside(source)
    if found is None:
        return False
    shutil.copytree(found, Path(dest) / CODEC_SUBFOLDER, dirs_exist_ok=True)
    with open(Path(dest) / "README.md", "a") as readme:
        readme.write(README_LINE)
    return True


def note_builtin_codec(dest: Path) -> bool:
    """The README line of a model whose codec is part of it (its family's `export_note`)."""
    try:
        config = json.loads((Path(dest) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    note = families.detect(families.ModelFiles(config=config)).export_note if isinstance(config, dict) else ""
    if not note:
        return False
    with open(Path(dest) / "README.md", "a") as readme:
        readme.write(note)
    return True
