"""trust_remote_code with approved_remote_code_fingerprint, end to end in the real worker:
a local model folder whose own modeling file (a LlamaForCausalLM subclass that writes a
marker file when imported) trains under its fingerprint, and after one byte of that file
changes the same config fails before any of the file runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from spawned_worker import demo_config, run_to_end

from typed_config import typed
from tunelab import events as ev
from tunelab.export.plan import ExportInputError, plan_export
from tunelab.inference.generate import LoadRefused, load_model
from tunelab.inference.target import resolve_target
from tunelab.remote_code.approval import read_remote_code

pytestmark = pytest.mark.slow

MODELING = '''"""A model's own code: the demo Llama under another name."""
from pathlib import Path

Path({marker!r}).write_text("imported")  # top-level code: proves whether this file ran

from transformers import LlamaForCausalLM


class MarkedForCausalLM(LlamaForCausalLM):
    pass
'''


def model_with_own_code(demo_assets, folder: Path, marker: Path) -> Path:
    """The demo model, with a modeling file of its own named in config.json's auto_map."""
    shutil.copytree(demo_assets.model_dir, folder)
    (folder / "modeling_marked.py").write_text(MODELING.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_marked.MarkedForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_approved_code_trains_and_changed_code_never_runs(demo_assets, tmp_path, home, monkeypatch):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf-modules"))  # transformers' copies of model code, per test
    marker = tmp_path / "marker"
    model = model_with_own_code(demo_assets, tmp_path / "own-code-model", marker)
    approved = read_remote_code(str(model)).fingerprint
    assert approved is not None and len(approved) == 64
    config = demo_config(demo_assets, tmp_path / "out", model_name=str(model), max_steps=2, trust_remote_code=True,
                         approved_remote_code_fingerprint=approved)

    final, _ = run_to_end(config)
    assert final["type"] == ev.COMPLETE, final
    assert marker.read_text() == "imported"  # the run used the model's own code
    marker.unlink()
    run = {"id": 1, "status": "completed", "output_dir": config["output_dir"], "config": config,
           "model_name": str(model), "modality": "text"}
    assert plan_export(run, 1, "adapter", None, None).kind == "adapter"  # approved code: export goes ahead

    modeling = model / "modeling_marked.py"
    modeling.write_bytes(modeling.read_bytes().replace(b"    pass", b"    pass "))  # one byte more
    changed = read_remote_code(str(model)).fingerprint
    assert changed != approved
    final, worker = run_to_end({**config, "output_dir": str(tmp_path / "out2")})

    assert final["type"] == ev.ERROR, final
    message = final["error"]
    assert "approved_remote_code_fingerprint" in message
    assert approved in message and changed in message and "modeling_marked.py" in message
    assert not any(e["type"] == ev.MODEL_LOAD_STARTED for e in worker.events)
    assert not marker.exists()  # not one line of the changed file ran

    # Export, chat and eval (the last two load through load_model) of the trained run check again.
    with pytest.raises(ExportInputError) as refused_export:
        plan_export(run, 1, "merged", None, None)
    assert refused_export.value.field == "approved_remote_code_fingerprint" and changed in str(refused_export.value)
    with pytest.raises(LoadRefused) as refused_chat:
        load_model(resolve_target(run, 1).child_request())
    assert "approved_remote_code_fingerprint" in str(refused_chat.value) and changed in str(refused_chat.value)
    assert not marker.exists()


def test_trust_remote_code_on_a_model_without_code_is_a_note_not_an_error(demo_assets):
    import queue

    from tunelab.worker.context import WorkerContext
    from tunelab.worker.entry import check_remote_code
    from tunelab.worker.run_config import worker_config

    events: queue.Queue = queue.Queue()
    config = worker_config({"model_name": str(demo_assets.model_dir), "trust_remote_code": True,
                            "local_datasets": [str(demo_assets.alpaca)]})
    check_remote_code(typed(config), WorkerContext(events))
    note = events.get_nowait()
    assert note["type"] == ev.STATUS and note["message"].startswith("note: trust_remote_code:")
    assert "changes nothing" in note["message"]
