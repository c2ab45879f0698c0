"""Where tunelab keeps things, and the one place that decides whether a path is allowed.

Layout under the home (`TUNELAB_HOME`, default `~/.tunelab`):
  tunelab.db   run history      outputs/   run folders (the outputs root)
  token        API token        datasets/  user data the server may read
  cache/       demo model/data  logs/      server logs
  previews/    one short-lived `datasets` cache per dataset preview
  locks/       who owns each running run, which device each run trains on
A run's own `datasets` caches (Arrow copies, tokenized rows) live in its folder, under
`.cache/datasets`, so they go wherever the folder goes (cancel, delete).
Any path a user gives is checked here: reads must stay inside the data roots (or the
outputs root), writes and deletions inside the outputs root unless explicitly allowed,
and symlinks are never followed out of a root.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path


class PathNotAllowed(ValueError):
    """A user-supplied path that points outside what tunelab manages."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def home() -> Path:
    root = Path(os.environ.get("TUNELAB_HOME") or Path.home() / ".tunelab").expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _sub(name: str) -> Path:
    folder = home() / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def outputs_root() -> Path:
    return _sub("outputs")


def datasets_root() -> Path:
    return _sub("datasets")


def cache_dir() -> Path:
    return _sub("cache")


def logs_dir() -> Path:
    return _sub("logs")


def previews_dir() -> Path:
    return _sub("previews")


def run_datasets_cache(output_dir: str | Path) -> Path:
    """Where a run's `datasets` caches go: inside its own folder, never the user's global cache."""
    return Path(output_dir) / ".cache" / "datasets"


def db_path() -> Path:
    return home() / "tunelab.db"


def locks_dir(database: str | Path) -> Path:
    """The lock files that go with one run database (`<home>/locks` for the default one):
    run ids and devices are per database, so their locks live beside it."""
    folder = Path(database).parent / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def token_path() -> Path:
    return home() / "token"


def data_roots() -> list[Path]:
    """Folders the server may read data and models from: the home's datasets, the demo
    cache, the outputs root, plus any in TUNELAB_DATA_ROOTS (os.pathsep-separated)."""
    roots = [datasets_root(), cache_dir(), outputs_root()]
    extra = os.environ.get("TUNELAB_DATA_ROOTS", "")
    roots += [Path(p).expanduser() for p in extra.split(os.pathsep) if p.strip()]
    return [Path(os.path.realpath(r)) for r in roots]


def is_within(path: str | Path, root: str | Path) -> bool:
    """True when `path`, with every symlink resolved, lies inside `root` (or is it)."""
    real = Path(os.path.realpath(path))
    real_root = Path(os.path.realpath(root))
    return real == real_root or real_root in real.parents


def check_usable(value: str, field: str) -> None:
    """A path the operating system can look up at all: no NUL byte, and characters this
    system can store in a file name (a JSON string may carry lone surrogates)."""
    if "\x00" in value:
        raise PathNotAllowed(field, f"{value!r} contains a NUL character, which no file path can; give a plain path")
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        raise PathNotAllowed(field, f"{value!r} has characters no file name on this system can hold; give a plain path") from None


def check_readable(value: str, field: str, roots: list[Path] | None = None) -> Path:
    """A data or checkpoint path the server may read: inside one of the roots after
    resolving `..` and symlinks. Relative paths are taken from the datasets root."""
    check_usable(value, field)
    roots = roots if roots is not None else data_roots()
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = datasets_root() / path
    if not any(is_within(path, r) for r in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise PathNotAllowed(field, f"{value!r} is outside the folders tunelab may read ({allowed}); copy the file into {datasets_root()} or add its folder to TUNELAB_DATA_ROOTS")
    return Path(os.path.realpath(path))


def check_model_source(name: str, field: str = "model_name") -> str:
    """A model as a user named it: a hub id (`org/name`) passes unchanged; a local folder
    — absolute, starting like a path, or existing relative to the working folder, where
    the worker would find it — must be readable (`check_readable`) and comes back
    absolute with symlinks resolved, so the worker loads exactly what was checked."""
    check_usable(name, field)
    if not (name.startswith(("/", "~", ".")) or Path(name).expanduser().exists()):
        return name
    return str(check_readable(str(Path(name).expanduser().absolute()), field))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60] or "run"


def new_output_dir(label: str) -> Path:
    """A fresh, unique run folder under the outputs root."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = outputs_root() / f"{stamp}-{slug(label)}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    return candidate


def resolve_output_dir(value: str | None, label: str, allow_outside: bool) -> Path:
    """Where a run writes: the given folder (inside the outputs root unless the caller
    allowed otherwise) or a new folder under the root."""
    if not value:
        return new_output_dir(label)
    check_usable(value, "output_dir")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = outputs_root() / path
    if not allow_outside and not is_within(path, outputs_root()):
        raise PathNotAllowed("output_dir", f"{value!r} is outside the outputs root {outputs_root()}; use a folder inside it or set allow_output_outside_root=true")
    if Path(os.path.realpath(path)) == Path(os.path.realpath(outputs_root())):
        # Every run's folder lives in the root; a run owning the root could delete them all.
        raise PathNotAllowed("output_dir", f"{value!r} is the outputs root itself; name a folder inside it, e.g. 'my-run'")
    return Path(os.path.realpath(path))


def resolve_export_dir(value: str | Path, field: str = "dest") -> Path:
    """Where an export may write: a folder inside the outputs root (relative paths are
    taken from the root), never the root itself, with symlinks resolved."""
    check_usable(str(value), field)
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = outputs_root() / path
    root = outputs_root()
    if not is_within(path, root) or Path(os.path.realpath(path)) == Path(os.path.realpath(root)):
        raise PathNotAllowed(field, f"{str(value)!r} is not a folder inside the outputs root {root}; export into a new folder inside it, or leave {field} out to use <run folder>/export-<format>")
    return Path(os.path.realpath(path))


def remove_inside(path: str | Path, root: str | Path | None = None) -> bool:
    """Delete a folder only if it really lies inside `root` (default: outputs root) and is
    not itself a symlink; never follows links out. Returns True when something was removed."""
    root = Path(root) if root is not None else outputs_root()
    path = Path(path)
    if path.is_symlink() or not path.exists():
        return False
    if not is_within(path, root) or Path(os.path.realpath(path)) == Path(os.path.realpath(root)):
        return False
    # rmtree does not follow symlinks inside the tree; it unlinks them.
    shutil.rmtree(path)
    return True
