"""Canary files outside every folder tunelab manages, and proof they were left alone.

`Canary.plant(folder)` writes files there (a data file, a model folder, a valid
checkpoint, a folder to write into) and `changes()` lists any whose content, mtime or
atime changed since. Reads show in the atime: each file's atime is set two days before
its mtime, so even a `relatime` mount records the next read. `atime_is_tracked` says
whether this filesystem records reads at all (then the atime check is meaningful).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint_factory import make_checkpoint

TWO_DAYS_NS = 2 * 86400 * 10**9
ALPACA_ROW = '{"instruction": "say canary", "input": "", "output": "canary"}\n'


def _age_atime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_mtime_ns - TWO_DAYS_NS, st.st_mtime_ns))


def _fingerprint(path: Path) -> tuple[str, int, int]:
    """Content hash, mtime and atime; the atime is put back after hashing reads the file."""
    st = path.stat()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return digest, st.st_mtime_ns, st.st_atime_ns


def atime_is_tracked(folder: Path) -> bool:
    probe = folder / "atime-probe"
    probe.write_text("probe")
    _age_atime(probe)
    before = probe.stat().st_atime_ns
    probe.read_bytes()
    tracked = probe.stat().st_atime_ns != before
    probe.unlink()
    return tracked


@dataclass
class Canary:
    root: Path
    fingerprints: dict[Path, tuple[str, int, int]] = field(default_factory=dict)

    @property
    def data_file(self) -> Path:
        return self.root / "canary.jsonl"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def checkpoint(self) -> Path:
        return self.root / "run" / "checkpoint-2"

    @property
    def victim_dir(self) -> Path:
        return self.root / "victim"

    @classmethod
    def plant(cls, root: Path) -> "Canary":
        canary = cls(root)
        root.mkdir(parents=True, exist_ok=True)
        canary.data_file.write_text(ALPACA_ROW * 20)
        canary.model_dir.mkdir()
        (canary.model_dir / "config.json").write_text('{"model_type": "llama"}')
        make_checkpoint(canary.checkpoint.parent, 2)
        canary.victim_dir.mkdir()
        (canary.victim_dir / "precious.txt").write_text("do not delete\n")
        for path in canary.files():
            _age_atime(path)
        canary.fingerprints = {path: _fingerprint(path) for path in canary.files()}
        return canary

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file())

    def changes(self) -> list[str]:
        """What changed since planting: missing, new, rewritten, touched or read files."""
        changes = []
        now = set(self.files())
        changes += [f"removed {p}" for p in sorted(set(self.fingerprints) - now)]
        changes += [f"created {p}" for p in sorted(now - set(self.fingerprints))]
        for path in sorted(now & set(self.fingerprints)):
            digest, mtime, atime = self.fingerprints[path]
            now_digest, now_mtime, now_atime = _fingerprint(path)
            if now_mtime != mtime:
                changes.append(f"modified {path}")
            if now_atime != atime:
                changes.append(f"read {path}")
            if now_digest != digest:
                changes.append(f"content changed {path}")
        return changes
