"""A model's own code and its fingerprint (tunelab.remote_code.approval, remote_code_check), read
from real folders without running any of it; the config's checks of the setting; and
`tunelab fingerprint MODEL` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunelab.config.run_config import ConfigError, parse_config
from tunelab.remote_code.approval import RemoteCodeUnavailable, read_remote_code
from tunelab.remote_code.check import FIELD, RemoteCodeRefused, check_approved, code_summary

RUNS = "raise SystemExit('this file must never run')\n"  # top-level code that would end any reader that ran it


def model_folder(folder: Path, auto_map: dict | None = None, tokenizer_map: dict | None = None, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **({"auto_map": auto_map} if auto_map else {})}))
    if tokenizer_map:
        (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": tokenizer_map}))
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def own_code_model(folder: Path) -> Path:
    return model_folder(folder, {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"},
                        {"AutoTokenizer": ["tokenization_x.XTokenizer", None]},
                        **{"configuration_x.py": RUNS, "modeling_x.py": RUNS + "from .layers.attention import A\n",
                           "layers/attention.py": RUNS + "import .rope\n", "layers/rope.py": RUNS,
                           "tokenization_x.py": RUNS, "unrelated.py": RUNS})


def test_the_named_files_and_their_relative_imports_are_fingerprinted_by_content(tmp_path):
    code = read_remote_code(str(own_code_model(tmp_path / "m")))
    assert sorted(code.files) == ["configuration_x.py", "layers/attention.py", "layers/rope.py", "modeling_x.py",
                                  "tokenization_x.py"]  # not unrelated.py: nothing names it
    assert len(code.fingerprint) == 64
    # Content only: the same files elsewhere, with other dates, give the same fingerprint.
    copy = own_code_model(tmp_path / "copy")
    os.utime(copy / "modeling_x.py", (1, 1))
    assert read_remote_code(str(copy)).fingerprint == code.fingerprint
    (copy / "layers" / "rope.py").write_text(RUNS + " ")  # one byte more in a file imported two steps down
    assert read_remote_code(str(copy)).fingerprint != code.fingerprint


def test_a_model_without_auto_map_has_no_code_and_bad_folders_are_named(tmp_path):
    plain = model_folder(tmp_path / "plain")
    assert read_remote_code(str(plain)).fingerprint is None
    assert "names no code of its own" in code_summary(str(plain), True)["note"]
    missing = model_folder(tmp_path / "missing", {"AutoModel": "modeling_gone.Gone"})
    with pytest.raises(RemoteCodeUnavailable, match="modeling_gone.py is named"):
        read_remote_code(str(missing))
    outside = model_folder(tmp_path / "outside", {"AutoModel": "..escape.Gone"})
    (tmp_path / "escape.py").write_text(RUNS)
    with pytest.raises(RemoteCodeUnavailable):
        read_remote_code(str(outside))
    with pytest.raises(RemoteCodeUnavailable, match="not a model folder"):
        read_remote_code(str(tmp_path / "nowhere"))


def test_a_changed_file_is_refused_naming_both_fingerprints_and_the_file(tmp_path, home):
    model = own_code_model(tmp_path / "m")
    approved = read_remote_code(str(model)).fingerprint
    config = {"model_name": str(model), "trust_remote_code": True, FIELD: approved}
    assert check_approved(config).fingerprint == approved
    (model / "tokenization_x.py").write_text(RUNS + "# changed\n")
    with pytest.raises(RemoteCodeRefused) as refused:
        check_approved(config)
    message = str(refused.value)
    changed = read_remote_code(str(model)).fingerprint
    assert refused.value.field == FIELD and approved in message and changed in message
    assert "changed: tokenization_x.py" in message and "modeling_x.py" not in message
    assert check_approved({**config, "trust_remote_code": False}) is None  # nothing runs, nothing to check
    unpinned = check_approved({**config, FIELD: None})
    assert unpinned is not None and unpinned.fingerprint == changed  # unpinned: read, not refused


@pytest.mark.parametrize(("settings", "says"), [
    ({FIELD: "abc123", "trust_remote_code": True}, "not a SHA-256 fingerprint (64 hexadecimal characters)"),
    ({FIELD: "g" * 64, "trust_remote_code": True}, "64 hexadecimal characters"),
    ({FIELD: "a" * 64}, "set trust_remote_code=true, or remove approved_remote_code_fingerprint"),
])
def test_bad_fingerprint_settings_are_config_errors_naming_the_field(settings, says):
    with pytest.raises(ConfigError) as refused:
        parse_config({"model_name": "org/model", "dataset": "org/data", **settings})
    assert [(e.field, says in e.message) for e in refused.value.errors] == [(FIELD, True)]


def test_the_cli_prints_the_files_and_the_fingerprint(tmp_path, home):
    model = own_code_model(tmp_path / "m")
    env = {**os.environ, "TUNELAB_HOME": str(home)}
    shown = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "fingerprint", str(model)], env=env, capture_output=True,
                           text=True, timeout=120)
    fingerprint = read_remote_code(str(model)).fingerprint
    assert shown.returncode == 0, shown.stderr
    assert f"{FIELD}: {fingerprint}" in shown.stdout and "layers/rope.py" in shown.stdout
    as_json = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "fingerprint", str(model), "--json"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert json.loads(as_json.stdout)["fingerprint"] == fingerprint
    missing = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "fingerprint", str(tmp_path / "nowhere")], env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "model_name" in missing.stderr and "Traceback" not in missing.stderr


def test_a_start_refuses_a_local_model_whose_code_changed_before_any_run_exists(tmp_path, home):
    from tunelab.orchestrator.prechecks import check_before_start

    model = own_code_model(tmp_path / "m")
    (model / "tokenizer_config.json").unlink()  # a simpler model: its config and modeling code
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": {"AutoModel": "modeling_x.X"}}))
    data = tmp_path / "train.jsonl"
    data.write_text('{"instruction": "a", "output": "b"}\n')
    settings = {"model_name": str(model), "local_datasets": [str(data)], "trust_remote_code": True,
                FIELD: read_remote_code(str(model)).fingerprint}
    check_before_start(parse_config(settings))  # the approved code: no refusal
    (model / "layers" / "rope.py").write_text(RUNS + "# changed\n")
    with pytest.raises(ConfigError) as refused:
        check_before_start(parse_config(settings))
    assert [e.field for e in refused.value.errors] == [FIELD]
    assert "layers/rope.py" in refused.value.errors[0].message
