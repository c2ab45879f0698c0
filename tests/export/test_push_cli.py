"""`tunelab push RUN REPO_ID` on a real trained run, against the loopback Hub stand-in
(tests/hub_standin.py, reached through HF_ENDPOINT): bad input exits 2 naming the option
with nothing sent (a bad repo id) or nothing created (a bad token, checked before the
export is written); a push exports the run when it has no export of the format and
lands every export file, byte for byte, with the model card and loss plot in one commit.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from export_helpers import TUNELAB, TrainedRun, train_run
from hub_standin import Account, HubStandIn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HF_TOKEN = "hf_cliPushToken0987654321"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    return train_run(tmp_path_factory.mktemp("push") / "home", demo_assets, max_steps=3, lora_r=8, lora_alpha=16)


@pytest.fixture
def hub():
    standin = HubStandIn({HF_TOKEN: Account("alice")}).start()
    yield standin
    standin.stop()


def push(trained: TrainedRun, hub: HubStandIn, *args: str, token: str | None = HF_TOKEN,
         **more_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"TUNELAB_HOME": str(trained.home), "COLUMNS": "200", **hub.env(), **({"HF_TOKEN": token} if token else {}),
                **more_env})
    return subprocess.run(TUNELAB + ["push", str(trained.run_id), *args], env=env, capture_output=True, text=True, timeout=600)


def export_folder(trained: TrainedRun, fmt: str) -> Path:
    return trained.output_dir / f"export-{fmt}"


def test_bad_input_exits_2_naming_the_option_with_nothing_on_the_hub(trained, hub):
    bad_id = push(trained, hub, "no-owner-here")
    assert bad_id.returncode == 2 and "REPO_ID: 'no-owner-here' is not a repo id" in bad_id.stderr, bad_id.stderr
    assert hub.requests == []
    no_token = push(trained, hub, "alice/x", token=None)
    assert no_token.returncode == 2 and "--token (or HF_TOKEN)" in no_token.stderr and "set HF_TOKEN" in no_token.stderr
    assert hub.requests == []
    wrong = push(trained, hub, "alice/x", "--token", "hf_notAValidToken42")
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert "--token (or HF_TOKEN): the Hub at" in wrong.stderr and "refused the token" in wrong.stderr
    assert "hf_notAValidToken42" not in wrong.stdout + wrong.stderr and "Traceback" not in wrong.stderr
    assert hub.repos == {} and hub.blobs == {}
    # The token was checked before the export: none was written.
    assert not export_folder(trained, "adapter").exists()
    asked = len(hub.requests)
    offline = push(trained, hub, "alice/x", HF_HUB_OFFLINE="1")
    assert offline.returncode == 1 and "HF_HUB_OFFLINE is set" in offline.stderr, offline.stderr
    assert len(hub.requests) == asked
    elsewhere = push(trained, hub, "bob/x")
    assert elsewhere.returncode == 2 and "REPO_ID: the token belongs to 'alice'" in elsewhere.stderr, elsewhere.stderr
    assert hub.repos == {}


def test_push_exports_the_adapter_and_lands_it_with_card_and_plot_in_one_commit(trained, hub):
    done = push(trained, hub, "alice/tiny-lora", "--private")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exported and pushed" in done.stdout and "new private repo" in done.stdout
    repo = hub.repos["alice/tiny-lora"]
    assert repo.private and len(repo.commits) == 1
    folder = export_folder(trained, "adapter")
    on_disk = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "tunelab-export.json"}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= set(on_disk)
    assert {name: repo.files[name] for name in on_disk} == on_disk
    assert set(repo.files) == set(on_disk) | {"README.md", "training_loss.png"}
    card = repo.files["README.md"].decode()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "peft" and {"tunelab", "lora", "sft"} <= set(meta["tags"])
    final_loss = f"{trained.run['final_loss']:.4g}"
    assert f"| final training loss | {final_loss} |" in card and "| steps | 3 of 3 |" in card
    assert "local file `alpaca" in card and "| lora_r | 8 |" in card
    assert str(trained.home) not in card and HF_TOKEN not in card
    assert repo.files["training_loss.png"].startswith(b"\x89PNG")
    stored = b"".join(p.read_bytes() for p in trained.home.rglob("*") if p.is_file())
    assert HF_TOKEN.encode() not in stored


def test_push_of_a_format_the_run_lacks_writes_that_export_first(trained, hub):
    done = push(trained, hub, "alice/tiny-merged", "--format", "merged")
    assert done.returncode == 0, done.stdout + done.stderr
    repo = hub.repos["alice/tiny-merged"]
    folder = export_folder(trained, "merged")
    on_disk = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "tunelab-export.json"}
    assert "model.safetensors" in on_disk and "config.json" in on_disk
    assert {name: repo.files[name] for name in on_disk} == on_disk
    meta = yaml.safe_load(repo.files["README.md"].decode().split("---\n")[1])
    assert meta["library_name"] == "transformers" and not repo.private


def test_an_unreachable_hub_exits_1_saying_so(trained, hub):
    with socket.socket() as probe:  # a loopback port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hub.url = f"http://127.0.0.1:{port}"
    failed = push(trained, hub, "alice/unreached")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"cannot reach the Hub at http://127.0.0.1:{port}" in failed.stderr and "Traceback" not in failed.stderr
