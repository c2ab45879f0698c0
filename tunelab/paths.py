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
and symlinks are never followed out of a root. A path the operating system cannot even
look up (a NUL byte, a name longer than the file system allows) is refused up front:
on Python 3.11 `Path.exists()` raises on an over-long name instead of answering False,
so nothing here looks a path up before `check_usable` has passed it.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit

# POSIX limits on Linux and macOS file systems; pathconf gives the real ones where it can.
DEFAULT_NAME_MAX = 255
DEFAULT_PATH_MAX = 4096
# How much of a refused value a message repeats: enough to recognise it.
SHOWN_CHARS = 60
# Set in the environment of a serving process (and so of every worker and preview it
# starts): files a run's data refers to — images named inside a data file — must then
# lie in the data roots too, like the data files themselves. A run from the machine's
# own CLI reads them wherever they are.
CONFINE_READS_ENV = "TUNELAB_CONFINE_READS"
# Set in the environment of a server started with `--allow-image-urls`: its runs may
# download images that data rows name by http(s) URL (see `image_urls_allowed`).
IMAGE_URLS_ENV = "TUNELAB_ALLOW_IMAGE_URLS"


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


def run_rank_config(output_dir: str | Path) -> Path:
    """Where a distributed run's launcher writes the config its ranks read (0600)."""
    return Path(output_dir) / "distributed" / "rank-config.json"


def run_datasets_cache(output_dir: str | Path) -> Path:
    """Where a run's `datasets` caches go: inside its own folder, never the user's global cache."""
    return Path(output_dir) / ".cache" / "datasets"


def run_images_cache(output_dir: str | Path) -> Path:
    """Where a run keeps the images it downloaded (http(s) URLs in its data), once each."""
    return Path(output_dir) / ".cache" / "images"


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


def reads_confined() -> bool:
    """Whether this process serves HTTP clients (or was started by a process that does)."""
    return os.environ.get(CONFINE_READS_ENV) == "1"


def image_urls_allowed() -> bool:
    """Whether this process may fetch images that data rows name by http(s) URL: a run from
    the machine's own CLI may; a served one only when the server was started with
    `--allow-image-urls`, since a server fetching the URLs its clients name can be made to
    request any address on its network."""
    return not reads_confined() or os.environ.get(IMAGE_URLS_ENV) == "1"


def is_within(path: str | Path, root: str | Path) -> bool:
    """True when `path`, with every symlink resolved, lies inside `root` (or is it)."""
    real = Path(os.path.realpath(path))
    real_root = Path(os.path.realpath(root))
    return real == real_root or real_root in real.parents


def shown(value: str) -> str:
    """A value as a message repeats it: quoted, and cut short when it is long."""
    text = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"
    return repr(text)


def _limits() -> tuple[int, int]:
    try:
        return os.pathconf(home(), "PC_NAME_MAX"), os.pathconf(home(), "PC_PATH_MAX")
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX, DEFAULT_PATH_MAX


def check_usable(value: str, field: str) -> None:
    """A path the operating system can look up at all: no NUL byte, characters this
    system can store in a file name (a JSON string may carry lone surrogates), and no
    name or whole path longer than the file system allows."""
    if "\x00" in value:
        raise PathNotAllowed(field, f"{shown(value)} contains a NUL character, which no file path can; give a plain path")
    try:
        raw = os.fsencode(os.path.expanduser(value))
    except UnicodeEncodeError:
        raise PathNotAllowed(field, f"{shown(value)} has characters no file name on this system can hold; give a plain path") from None
    name_max, path_max = _limits()
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if len(raw) >= path_max or longest > name_max:
        limit = f"a name of at most {name_max} bytes" if longest > name_max else f"a path of at most {path_max - 1} bytes"
        raise PathNotAllowed(field, f"{shown(value)} is longer than this file system allows ({len(value)} characters; "
                                    f"it takes {limit}); use a shorter path")


def exists(path: str | Path) -> bool:
    """`Path.exists()` that answers False, instead of raising, for a path the system
    cannot look up (too long, a component that is a file, no permission)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def is_dir(path: str | Path) -> bool:
    """`Path.is_dir()` that answers False instead of raising (see `exists`)."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def check_readable(value: str, field: str, roots: list[Path] | None = None) -> Path:
    """A data or checkpoint path the server may read: inside one of the roots after
    resolving `..` and symlinks. Relative paths are taken from the datasets root; a
    `file:` URL is read as the path it names."""
    value = file_url_path(value) or value
    check_usable(value, field)
    roots = roots if roots is not None else data_roots()
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = datasets_root() / path
    if not any(is_within(path, r) for r in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise PathNotAllowed(field, f"{shown(value)} is outside the folders tunelab may read ({allowed}); copy the file into {datasets_root()} or add its folder to TUNELAB_DATA_ROOTS")
    return Path(os.path.realpath(path))


def file_url_path(value: str) -> str | None:
    """The local path a `file:` URL names (`file:///data/x` -> `/data/x`), else None."""
    if not value.lower().startswith("file:"):
        return None
    parts = urlsplit(value)
    return unquote(parts.path) or "/"


def names_local_path(value: str) -> bool:
    """True when a library given `value` where it takes "a hub id or a local path" would
    read the local file system: it is absolute, starts like a path (`~`, `.`), or
    exists relative to the working folder, which the worker shares with the server."""
    return value.startswith(("/", "~", ".")) or exists(os.path.expanduser(value))


def check_hub_or_local(name: str, field: str) -> str:
    """A model or dataset as a user named it: a hub id (`org/name`) passes unchanged; a
    local path — `names_local_path`, or a `file:` URL — must be readable
    (`check_readable`) and comes back absolute with symlinks resolved, so the worker
    loads exactly what was checked."""
    check_usable(name, field)
    local = file_url_path(name)
    if local is None and not names_local_path(name):
        return name
    check_usable(local or name, field)
    return str(check_readable(str(Path(os.path.expanduser(local or name)).absolute()), field))


def check_model_source(name: str, field: str = "model_name") -> str:
    """A model folder or hub id (see `check_hub_or_local`)."""
    return check_hub_or_local(name, field)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60] or "run"


def new_output_dir(label: str, taken: Callable[[Path], bool] | None = None) -> Path:
    """A fresh, unique run folder under the outputs root: not on disk, and not `taken`
    (another run's folder that its worker has not made yet: runs start in the same second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = outputs_root() / f"{stamp}-{slug(label)}"
    candidate, n = base, 1
    while candidate.exists() or (taken is not None and taken(candidate)):
        n += 1
        candidate = Path(f"{base}-{n}")
    return candidate


def resolve_output_dir(value: str | None, label: str, allow_outside: bool,
                       taken: Callable[[Path], bool] | None = None) -> Path:
    """Where a run writes: the given folder (inside the outputs root unless the caller
    allowed otherwise) or a new folder under the root (see new_output_dir)."""
    if not value:
        return new_output_dir(label, taken)
    return resolve_write_dir(value, "output_dir", allow_outside)


def resolve_write_dir(value: str, field: str, allow_outside: bool) -> Path:
    """A folder a run writes into (`output_dir`, a tracker's log folder): relative paths
    start at the outputs root; it must lie inside the root (unless the caller allowed
    otherwise) and never be the root itself. Comes back with symlinks resolved. A
    `file:` URL is taken as the path it names."""
    value = file_url_path(value) or value
    check_usable(value, field)
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = outputs_root() / path
    if not allow_outside and not is_within(path, outputs_root()):
        raise PathNotAllowed(field, f"{shown(value)} is outside the outputs root {outputs_root()}; use a folder inside it or set allow_output_outside_root=true")
    if Path(os.path.realpath(path)) == Path(os.path.realpath(outputs_root())):
        # Every run's folder lives in the root; a run owning the root could delete them all.
        raise PathNotAllowed(field, f"{shown(value)} is the outputs root itself; name a folder inside it, e.g. 'my-run'")
    return Path(os.path.realpath(path))


def resolve_export_dir(value: str | Path, field: str = "dest") -> Path:
    """Where an export may write: a folder inside the outputs root (relative paths are
    taken from the root), never the root itself, with symlinks resolved."""
    check_usable(str(value), field)
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = outputs_root() / path
    root = outputs_root()
    if not is_within(path, root) or Path(os.path.realpath(path)) == Path(os.path.realpath(root)):
        raise PathNotAllowed(field, f"{shown(str(value))} is not a folder inside the outputs root {root}; export into a new folder inside it, or leave {field} out to use <run folder>/export-<format>")
    return Path(os.path.realpath(path))


def remove_inside(path: str | Path, root: str | Path | None = None) -> bool:
    """Delete a folder only if it really lies inside `root` (default: outputs root) and is
    not itself a symlink; never follows links out. Returns True when something was removed."""
    root = Path(root) if root is not None else outputs_root()
    path = Path(path)
    try:
        if path.is_symlink() or not path.exists():
            return False
    except (OSError, ValueError):
        return False  # a path that cannot even be looked up holds nothing to remove
    if not is_within(path, root) or Path(os.path.realpath(path)) == Path(os.path.realpath(root)):
        return False
    # rmtree does not follow symlinks inside the tree; it unlinks them.
    shutil.rmtree(path)
    return True
