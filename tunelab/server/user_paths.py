"""What an HTTP client may put in a run config: its paths, and the settings that need
the server's own opt-in.

A client of the server may only make it read inside the folders tunelab manages (the
data roots of `tunelab.paths`) and write inside the outputs root. Every field that can
name a local path is checked there — data and eval files, a model folder, a `dataset`
that is really a local folder, the run folder, the checkpoint to resume from, the
TensorBoard folder and a local MLflow store — and the config handed on carries the
checked, absolute, symlink-free paths, so the worker reads exactly what was checked (a
relative path or a symlink cannot be re-interpreted later). Hub ids and remote URLs
(an S3 endpoint, an MLflow server) pass through unchanged.

`trust_remote_code` runs code from the model's repository, `allow_output_outside_root`
writes anywhere the server's user can, `ray_address` sends the run's config, secrets
included, to a Ray cluster and a `python` entry in `rewards` runs the user's own reward
file in the worker: over HTTP each is refused (403) unless the server was started with
`--allow-remote-code` / `--allow-output-anywhere` / `--allow-ray` / `--allow-multi-node` /
`--allow-reward-code` (and a reward file must lie in the data roots, like data files), and then
only for an admin (the token, or an admin key: tunelab.keys). `--allow-remote-code` admits
`trust_remote_code` only with `approved_remote_code_fingerprint` (the worker then loads only
that code); without one it needs `--allow-unpinned-remote-code`. The CLI, run by the
machine's own user, does not come through here. A chosen `output_dir` must be the caller's
to write into (`check_output_dir_owned`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from tunelab import paths
from tunelab.config.run_config import RunConfig, parse_config
from tunelab.config.resume import stored_settings
from tunelab.folder_owners import foreign_writer, owner_words, writers_touching
from tunelab.config.grpo import uses_reward_code
from tunelab.paths import PathNotAllowed
from tunelab.remote_code.check import FIELD as FINGERPRINT_FIELD
from tunelab.server.errors import ApiError

PATH_LIST_FIELDS = ("local_datasets", "local_eval_datasets")
WRITE_DIR_FIELDS = ("output_dir", "tensorboard_dir")
# MLflow tracking URIs that name a server (SQLAlchemy-style "scheme+driver" included).
REMOTE_MLFLOW_SCHEMES = frozenset({"http", "https", "databricks", "databricks-uc", "uc", "postgresql", "mysql", "mssql"})
KNOWN_FILE_READERS = frozenset({"json", "csv", "text", "parquet", "arrow", "pandas", "xml", "sql", "webdataset",
                                "imagefolder", "audiofolder", "videofolder"})
# Settings that need an opt-in given when the server was started: field -> the flag.
OPT_INS = {"trust_remote_code": "--allow-remote-code", "allow_output_outside_root": "--allow-output-anywhere",
           "ray_address": "--allow-ray", "nodes": "--allow-multi-node", "rewards": "--allow-reward-code"}
# trust_remote_code without an approved fingerprint needs this stronger opt-in (it implies --allow-remote-code).
UNPINNED_FLAG = "--allow-unpinned-remote-code"
OPT_IN_WHY = {"trust_remote_code": "it runs code from the model's repository on this machine",
              "allow_output_outside_root": "it lets a run write anywhere this server's user can",
              "ray_address": "it sends the run's config, secrets included, to a Ray cluster",
              "nodes": "it opens torchrun's rendezvous port to the network, and torch.distributed's traffic is not authenticated",
              "rewards": "it imports and runs the Python file on this machine"}


@functools.lru_cache(maxsize=1)
def dataset_file_readers() -> frozenset[str]:
    """Names `datasets.load_dataset` takes as its own file readers (json, csv, text, ...),
    which without data files read the working folder. Found from the installed package's
    folders, since the server never imports `datasets` itself; the common ones are
    known beforehand in case that folder moves."""
    spec = importlib.util.find_spec("datasets")
    if spec is None or not spec.submodule_search_locations:
        return KNOWN_FILE_READERS
    folder = Path(next(iter(spec.submodule_search_locations))) / "packaged_modules"
    return KNOWN_FILE_READERS | {p.name for p in _entries(folder) if p.is_dir() and not p.name.startswith("_")}


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def check_opt_ins(config: Mapping[str, Any], state: Any, run_id: int | None = None, action: str = "resume",
                  fields: tuple[str, ...] = tuple(OPT_INS), role: str = "admin") -> None:
    """403 naming the field and the server flag, for a setting this server was not
    started to allow, or that the caller's `role` (not admin) may not use. With `run_id`
    it is worded for a stored run being resumed or exported (`action`)."""
    unpinned_allowed = getattr(state, "allow_unpinned_remote_code", False)
    allowed = {"trust_remote_code": state.allow_remote_code or unpinned_allowed,
               "allow_output_outside_root": state.allow_output_anywhere,
               "ray_address": state.allow_ray, "nodes": state.allow_multi_node,
               "rewards": getattr(state, "allow_reward_code", False)}
    for field in fields:
        wanted = uses_reward_code(config) if field == "rewards" else config.get(field)
        if wanted and not allowed[field]:
            flag = OPT_INS[field]
            value = config[field]
            setting = ("a python reward (rewards with name: python)" if field == "rewards"
                       else f"{field}={value!r}" if isinstance(value, str)
                       else f"{field} (a {value.get('count')}-node run)" if isinstance(value, Mapping) else f"{field}=true")
            whose = f"run {run_id} was started with {setting}, so an HTTP {action}" if run_id is not None else setting
            alternative = f"{action} it with `tunelab {action} {run_id}`" if run_id is not None else "run it with `tunelab train`"
            raise ApiError(403, "opt_in_required",
                           f"{whose} is refused over HTTP: {OPT_IN_WHY[field]}. Start the server with `tunelab serve {flag}` "
                           f"to allow it, or {alternative} on the machine itself", field=field)
        if wanted and role != "admin":  # built-in rewards are no opt-in; only a python reward file is
            what = f"run {run_id} was started with {field}, so an HTTP {action} of it" if run_id is not None else field
            raise ApiError(403, "admin_required", f"{what} needs an admin key: {OPT_IN_WHY[field]}, and this server "
                                                  f"lets only admins use it (your key's role: {role})", field=field)
        if field == "trust_remote_code" and wanted and not config.get(FINGERPRINT_FIELD) and not unpinned_allowed:
            _refuse_unpinned(config, run_id, action)


def _refuse_unpinned(config: Mapping[str, Any], run_id: int | None, action: str) -> None:
    """403 for trust_remote_code without an approved fingerprint: it would run whatever code
    the model holds when it loads, so it needs the stronger opt-in."""
    model = config.get("model_name")
    if run_id is not None:
        what = (f"run {run_id} was started with trust_remote_code and no {FINGERPRINT_FIELD}, so an HTTP {action} "
                f"of it is refused: it would run whatever code {model} holds now")
        fix = f"or {action} it with `tunelab {action} {run_id}` on the machine itself"
    else:
        what = (f"trust_remote_code without {FINGERPRINT_FIELD} is refused over HTTP: it would run whatever code {model} "
                "holds when the run loads it")
        fix = (f"or review the model's code files and set {FINGERPRINT_FIELD} to the fingerprint `tunelab fingerprint "
               f"{model}` prints (the dataset preview and memory estimate show it too)")
    raise ApiError(403, "opt_in_required", f"{what}. Start the server with `tunelab serve {UNPINNED_FLAG}` to allow that, "
                                           f"{fix}", field="trust_remote_code")


def checked_config(config: RunConfig, state: Any, role: str = "admin") -> RunConfig:
    """A config from an HTTP client: opt-ins checked (for the caller's role), then every path confined."""
    check_opt_ins(config.model_dump(), state, role=role)
    return confine_user_paths(config)


def check_output_dir_owned(config: RunConfig, store: Any, owner: str | None) -> None:
    """409 when the run's chosen `output_dir` holds files that no run of `owner` wrote, or
    is, holds or lies in a folder or export of another owner's run (`tunelab.folder_owners`).
    The config's paths are confined (resolved) already."""
    if not config.output_dir:
        return
    if any(w.what == "folder" for w in writers_touching(store, config.output_dir)):
        return  # the start's own check refuses any run folder taken or nested, naming that run (422)
    whose = foreign_writer(store, config.output_dir, run_id=None, owner=owner)
    if whose:
        raise ApiError(409, "folder_not_owned", f"output_dir {config.output_dir} holds {whose}; a new run never writes among files "
                                                "it does not own. Choose a new folder, or leave output_dir out for a fresh one",
                       field="output_dir")


def check_resume_owned(config: RunConfig, store: Any, role: str, key_name: str | None) -> None:
    """403 when a member's new run would continue another owner's run: `resume_from` naming
    that run's id, or a checkpoint in that run's folder or exports. Continuing a run hands
    the new run its weights and optimizer state, as `POST /api/runs/{id}/resume` would, and
    that route is the owner's (or an admin's) too. The config's paths are resolved already."""
    target = (config.resume_from or "").strip()
    if not target or role == "admin":
        return
    if target.isdigit():
        run = store.get_run(int(target))
        owners = [(int(target), run.get("owner"))] if run is not None else []
    else:
        owners = [(w.run_id, w.owner) for w in writers_touching(store, target)]
    for run_id, owner in owners:
        if owner != key_name:
            raise ApiError(403, "not_owner", f"resume_from names run {run_id}'s checkpoint, which belongs to "
                                             f"{owner_words(owner)}; the member key {key_name!r} may continue only "
                                             "its own runs: ask its owner or an admin", field="resume_from")


class PathsNotAllowed(PathNotAllowed):
    """Several fields' paths refused at once: named by the first, all of them in `refusals`."""

    def __init__(self, refusals: list[PathNotAllowed]):
        self.refusals = refusals
        super().__init__(refusals[0].field, str(refusals[0]))


def confine_user_paths(config: RunConfig) -> RunConfig:
    """The config with every local path checked by `tunelab.paths` and replaced by its
    resolved form. Every refused path is named at once (PathNotAllowed naming the field,
    PathsNotAllowed for several), so a form can mark them all in one attempt."""
    refused: list[PathNotAllowed] = []
    updates: dict[str, object] = {}
    for field in PATH_LIST_FIELDS:
        updates[field] = [str(_attempt(refused, paths.check_readable, item, field)) for item in getattr(config, field)]
    updates["model_name"] = _attempt(refused, paths.check_model_source, config.model_name)
    if config.tts_codec:  # a folder the worker loads weights from, or a hub repo: confined like the model
        updates["tts_codec"] = _attempt(refused, paths.check_model_source, config.tts_codec, "tts_codec")
    if config.dataset:
        updates["dataset"] = _attempt(refused, _dataset_source, config.dataset)
    outside = config.allow_output_outside_root  # refused by check_opt_ins unless the server allows it
    for field in WRITE_DIR_FIELDS:
        value = getattr(config, field)
        if value:
            updates[field] = str(_attempt(refused, paths.resolve_write_dir, value, field, outside))
    if config.mlflow_tracking_uri:
        updates["mlflow_tracking_uri"] = _attempt(refused, _mlflow_uri, config.mlflow_tracking_uri, outside)
    if uses_reward_code(config):
        updates["rewards"] = [spec.model_copy(update={"path": str(_attempt(refused, paths.check_readable, spec.path, f"rewards.{i}.path"))})
                              if spec.name == "python" else spec for i, spec in enumerate(config.rewards)]
    if config.resume_from and not config.resume_from.strip().isdigit():
        updates["resume_from"] = str(_attempt(refused, _checkpoint_folder, config.resume_from.strip()))
    if len(refused) > 1:
        raise PathsNotAllowed(refused)
    if refused:
        raise refused[0]
    return config.model_copy(update=updates)


def _attempt(refused: list[PathNotAllowed], check: Any, *args: Any) -> Any:
    """`check(*args)`, or None with its refusal added to `refused` (the caller raises them)."""
    try:
        return check(*args)
    except PathNotAllowed as exc:
        refused.append(exc)
        return None


def check_stored_config(run: Mapping[str, Any], state: Any, role: str = "admin") -> None:
    """Before an HTTP resume: the stored run's settings pass the same opt-ins and path
    rules as a new start (a run started from the CLI may name folders the server may not)."""
    check_opt_ins(run["config"], state, run_id=run["id"], role=role)
    confine_user_paths(parse_config({**stored_settings(run["config"]), "resume_from": None, "output_dir": run.get("output_dir")}))


def _dataset_source(value: str) -> str:
    """`dataset` is handed to `datasets.load_dataset`, which also loads local folders and
    files: a hub id passes, a local path is confined like local data, the rest refused."""
    if value.strip().lower() in dataset_file_readers():
        raise PathNotAllowed("dataset", f"{value!r} names one of the datasets library's file readers, which would read the "
                                        "server's working folder; put your files in local_datasets instead")
    lowered = value.lower()
    if "::" in value or ("://" in value and not lowered.startswith(("hf://", "file:"))):
        raise PathNotAllowed("dataset", f"{paths.shown(value)} is not a hub dataset id; give an id such as org/name, "
                                        "or local files in local_datasets")
    return paths.check_hub_or_local(value, "dataset")


def _mlflow_uri(value: str, allow_outside: bool) -> str:
    """A tracking URI naming a server passes; a local store (a `file:` URL, a `sqlite:`
    database or a bare path, which MLflow takes as a folder) is a place the run writes."""
    paths.check_usable(value, "mlflow_tracking_uri")
    scheme = urlsplit(value).scheme.lower()
    if scheme.split("+")[0] in REMOTE_MLFLOW_SCHEMES:
        return value
    local = paths.file_url_path(value)
    if local is not None:
        return "file://" + str(paths.resolve_write_dir(local, "mlflow_tracking_uri", allow_outside))
    if scheme == "sqlite":
        database = value.split(":///", 1)[1] if ":///" in value else ""
        if not database:
            raise PathNotAllowed("mlflow_tracking_uri", f"{paths.shown(value)} names no database file; write sqlite:///<file>")
        return "sqlite:///" + str(paths.resolve_write_dir(database, "mlflow_tracking_uri", allow_outside))
    if scheme and len(scheme) > 1:
        raise PathNotAllowed("mlflow_tracking_uri", f"{paths.shown(value)} is neither an MLflow server URL (http, https, "
                                                    "databricks, a database) nor a local folder inside the outputs root")
    return "file://" + str(paths.resolve_write_dir(value, "mlflow_tracking_uri", allow_outside))


def _checkpoint_folder(value: str) -> Path:
    """`resume_from` as a folder: relative paths start at the outputs root, as the
    orchestrator reads them; it must lie in a folder tunelab may read."""
    paths.check_usable(value, "resume_from")
    candidate = Path(os.path.expanduser(value))
    if not candidate.is_absolute():
        candidate = paths.outputs_root() / candidate
    return paths.check_readable(str(candidate), "resume_from")
