"""A model's own Python code and its fingerprint, read without running any of it.

`trust_remote_code` makes transformers import the `*.py` files a model names in the
`auto_map` of its config.json and of its tokenizer and processor configs (and the files
those import relatively). `read_remote_code` finds exactly those files — in a local model
folder, or in a hub repository — and hashes their content; their fingerprint is the
SHA-256 of the `sha256sum`-style listing ("<sha256>  <name>\\n" per file, sorted by name),
so it depends on the files' names and bytes and on nothing else (no dates, no modes).
Torch-free: the server reads it for previews, estimates and opt-ins; `remote_code_check`
refuses a load whose code is not the approved one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The configs whose `auto_map` transformers follows when it builds a config, model,
# tokenizer, processor, image/video processor or feature extractor.
CONFIG_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                "video_preprocessor_config.json")
# transformers' own patterns for a module's relative imports (dynamic_module_utils).
RELATIVE_IMPORTS = (re.compile(r"^\s*import\s+\.(\S+)\s*$", re.MULTILINE),
                    re.compile(r"^\s*from\s+\.(\S+)\s+import", re.MULTILINE))
MAX_FILES = 200  # far beyond any real model; bounds a cycle-free but endless chain of imports


class RemoteCodeUnavailable(Exception):
    """The code files cannot be read (not downloaded, not in the cache, unreadable)."""


@dataclass(frozen=True)
class RemoteCode:
    """The model's code files: name -> SHA-256 of its content (names relative to the
    model; a file from another repository is named "repo--file.py", as auto_map names it)."""

    model: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str | None:
        """None when the model names no code of its own."""
        return fingerprint_of(self.files) if self.files else None

    def as_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "files": [{"name": n, "sha256": h} for n, h in sorted(self.files.items())]}


def fingerprint_of(files: dict[str, str]) -> str:
    listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def read_remote_code(model: str, token: str | None = None, download: bool = True) -> RemoteCode:
    """The code files `model` (a local folder or a hub id) would have transformers run.
    `download=False` reads a hub model only from the local hub cache (for answers that
    must not wait on the network). Raises RemoteCodeUnavailable."""
    files: dict[str, str] = {}
    readers = {model: _Reader(model, token, download)}
    pending = _auto_map_modules(readers[model])
    while pending:
        repo, module = pending.pop()
        name = module.replace(".", "/") + ".py"
        shown = name if repo == model else f"{repo}--{name}"
        if shown in files:
            continue
        if len(files) >= MAX_FILES:
            raise RemoteCodeUnavailable(f"{model} names more than {MAX_FILES} code files")
        reader = readers.get(repo) or readers.setdefault(repo, _Reader(repo, token, download))
        content = reader.read(name)
        if content is None:
            raise RemoteCodeUnavailable(f"{shown} is named in {model}'s auto_map (or imported by its code) but {reader.missing(name)}")
        files[shown] = hashlib.sha256(content).hexdigest()
        base = module.rsplit(".", 1)[0] + "." if "." in module else ""
        text = content.decode("utf-8", errors="replace")
        pending += [(repo, base + found) for pattern in RELATIVE_IMPORTS for found in pattern.findall(text)]
    return RemoteCode(model, files)


def _auto_map_modules(reader: "_Reader") -> list[tuple[str, str]]:
    """(repo, module) of every class reference in the configs' auto_maps."""
    found = []
    for config_name in CONFIG_FILES:
        raw = reader.read(config_name)
        if raw is None:
            continue
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise RemoteCodeUnavailable(f"{reader.model}'s {config_name} is not valid JSON ({exc})") from None
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        for value in (auto_map or {}).values() if isinstance(auto_map, dict) else ():
            for reference in value if isinstance(value, list) else [value]:
                if isinstance(reference, str) and "." in reference:
                    repo, _, local = reference.rpartition("--")
                    found.append((repo or reader.model, local.rsplit(".", 1)[0]))
    return found


class _Reader:
    """Files of one model: a local folder's, or a hub repository's (downloaded, or only
    from the local cache)."""

    def __init__(self, model: str, token: str | None, download: bool):
        self.model, self.token, self.download = model, token, download
        self.folder = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        if self.folder is None and model.startswith(("/", "~", ".")):
            raise RemoteCodeUnavailable(f"{model} is not a model folder (no such folder)")

    def read(self, name: str) -> bytes | None:
        path = self._local(name) if self.folder is not None else self._hub(name)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise RemoteCodeUnavailable(f"{path} cannot be read ({exc})") from None

    def missing(self, name: str) -> str:
        if self.folder is not None or self.download:
            return f"{self.model} has no such file"
        return f"it is not in the local hub cache (the run downloads it; `tunelab fingerprint {self.model}` does too)"

    def _local(self, name: str) -> Path | None:
        path = (self.folder / name).resolve()
        if not path.is_relative_to(self.folder.resolve()):  # "../x" in an auto_map reads nothing outside the model
            raise RemoteCodeUnavailable(f"{name} in {self.model}'s auto_map lies outside the model folder")
        return path if path.is_file() else None

    def _hub(self, name: str) -> Path | None:
        try:
            if not self.download:
                from huggingface_hub import try_to_load_from_cache

                cached = try_to_load_from_cache(self.model, name)
                return Path(cached) if isinstance(cached, str) else None
            from huggingface_hub import hf_hub_download
            from huggingface_hub.errors import EntryNotFoundError

            try:
                return Path(hf_hub_download(self.model, name, token=self.token))
            except EntryNotFoundError:
                return None
        except Exception as exc:  # not a repo id, no network, gated, ...: the files cannot be had
            raise RemoteCodeUnavailable(f"{self.model}'s {name} cannot be fetched ({type(exc).__name__}: {exc})") from None
