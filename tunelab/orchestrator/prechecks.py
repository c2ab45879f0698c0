"""What a start can check in the parent before a run exists.

A missing data file or a model that cannot be found would otherwise surface only after
a worker was spawned and a history row created. These checks are cheap and read only
the first bytes of a file: local data files exist, are files and look like their type;
a local model folder holds `config.json`; a hub model is either in the local hub cache
or the hub answers (one HEAD request with a short timeout, on a thread so a slow DNS
lookup cannot hang a start). Every problem is reported at once as a `ConfigError`.
Ray must be installed for a run on a Ray cluster. A model of a family the mlx backend does
not train (vision-language, audio chat, speech-to-text, text-to-speech, a sentence-transformers
folder: the family specs tell) is refused for the mlx backend.
A local model folder whose code is not the approved code (approved_remote_code_fingerprint) is refused. No heavy library is imported; `huggingface_hub` only to look in its cache.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

from tunelab import families, layout
from tunelab.config.run_config import ConfigError, FieldError, RunConfig
from tunelab.families.local_files import local_files
from tunelab.remote_code.check import RemoteCodeRefused, check_approved

DATA_FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
HUB_TIMEOUT_S = 3.0
SNIFF_BYTES = 4096
_TRUE = {"1", "ON", "YES", "TRUE"}


def check_before_start(cfg: RunConfig) -> None:
    """Raise ConfigError naming every local file or model the run could not use."""
    errors = []
    for field in ("local_datasets", "local_eval_datasets"):
        for name in getattr(cfg, field):
            problem = data_file_problem(name)
            if problem:
                errors.append(FieldError(field=field, message=problem))
    problem = model_problem(cfg.model_name)
    if problem:
        errors.append(FieldError(field="model_name", message=problem))
    if not problem and cfg.resolved_backend == "mlx":
        problem = mlx_model_problem(cfg.model_name)
        if problem:
            errors.append(FieldError(field="backend", message=problem))
    if not problem and cfg.trust_remote_code and cfg.approved_remote_code_fingerprint and Path(cfg.model_name).expanduser().is_dir():
        try:  # a local folder's code is read at once; a hub model's, by the worker (it downloads)
            check_approved(cfg.model_dump())
        except RemoteCodeRefused as exc:
            errors.append(FieldError(field=exc.field, message=str(exc)))
    if cfg.ray_address and importlib.util.find_spec("ray") is None:  # looked up, never imported: the parent must not load Ray
        errors.append(FieldError(field="ray_address", message=layout.RAY_NOT_INSTALLED))
    if errors:
        raise ConfigError(errors)


def data_file_problem(name: str) -> str | None:
    path = Path(name).expanduser()
    try:
        if path.is_dir():
            return f"{path} is a folder; list the data files inside it ({', '.join(DATA_FILE_SUFFIXES)})"
        if not path.exists():
            return f"{path} does not exist; check the path"
    except OSError as exc:
        return f"{path} cannot be looked up ({exc.strerror}); check the path"
    suffix = path.suffix.lower()
    if suffix not in DATA_FILE_SUFFIXES:
        return f"{path.name} is not a data file tunelab reads; use a {', '.join(DATA_FILE_SUFFIXES)} file"
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror}); check its permissions"
    if not head.strip():
        return f"{path} is empty; it needs at least one row"
    if suffix == ".parquet" and not head.startswith(b"PAR1"):
        return f"{path.name} is not a Parquet file (it lacks the PAR1 header); save it as Parquet or rename it"
    if suffix in (".json", ".jsonl") and head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        return f"{path.name} does not hold JSON (it does not start with '{{' or '['); check the file or its suffix"
    return None


def model_problem(name: str) -> str | None:
    """A local folder must hold config.json; a hub id must be cached or the hub reachable."""
    path = Path(name).expanduser()
    try:
        local = name.startswith(("/", "~", ".")) or path.exists()
        if local and not path.exists():
            return f"no folder at {path}; give a local model folder or a hub id such as org/name"
        if local and not path.is_dir():
            return f"{path} is a file; give the model's folder (the one holding config.json)"
        if local and not (path / "config.json").is_file():
            return f"{path} has no config.json, so it is not a model folder; point at the folder that holds config.json"
    except OSError as exc:
        return f"{path} cannot be looked up ({exc.strerror}); check the path"
    if local or _in_hub_cache(name):
        return None
    if _offline():
        reason = "offline mode is on"
    elif not hub_reachable():
        reason = "no network"
    else:
        return None
    return (f"not a local folder, and the hub cannot be reached ({reason}); give a local model folder, "
            "or download the model once while online")


def mlx_model_problem(name: str) -> str | None:
    """The mlx backend trains generative text models only: a model whose family (`families.detect`
    on its config.json, local or in the hub cache, the tokenizer.json beside it, and a local
    folder's sentence-transformers files) the mlx backend does not train is refused, in the
    family's words, before the run exists."""
    return families.detect(local_files(name)).backend_refusal(name, "mlx")


def _offline() -> bool:
    return any(os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a name that is no valid repo id is simply not cached
        return False
    return isinstance(found, str)


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """True when the hub answers a HEAD request (any HTTP status) within `timeout`."""
    import urllib.error  # here: only a start from the hub asks, and the server's start-up need not pay
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    answered = threading.Event()

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
            answered.set()
        except urllib.error.HTTPError:
            answered.set()
        except (OSError, ValueError):
            pass

    # DNS lookups ignore the socket timeout; the thread is abandoned if it overruns.
    thread = threading.Thread(target=probe, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return answered.is_set()
