"""Where `datasets` writes its Arrow copies and tokenized caches: a run's inside its own
folder (removed when the run completes, or with the folder on delete), a preview's in a folder under the home that the
server removes afterwards, also when it kills the preview at its timeout — and nothing in
the user's global cache (`~/.cache/huggingface/datasets`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sse_helpers import final_event, start_run, stream_until_end

pytestmark = pytest.mark.slow  # trains through a real worker


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    """A HOME of our own for the server and everything it starts, with the Hugging Face
    caches at their defaults under it."""
    folder = tmp_path / "user"
    folder.mkdir()
    for name in ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return folder


def global_datasets_cache(user_home: Path) -> list[Path]:
    return sorted((user_home / ".cache" / "huggingface" / "datasets").rglob("*"))


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_runs_and_previews_keep_their_data_caches_to_themselves(start_server, user_home, demo_run, demo_assets):
    server = start_server(extra_env={"HOME": str(user_home)})
    client = server.client()

    preview = client.post("/api/datasets/preview", json={"local_datasets": [str(demo_assets.alpaca)], "rows": 2})
    assert preview.status_code == 200, preview.text
    assert files_under(server.home / "previews") == []
    assert global_datasets_cache(user_home) == []

    # eval_steps > 0 holds out eval rows: one more cache file (the split's indices).
    job = start_run(client, demo_run(max_steps=3, eval_steps=2))
    assert final_event(stream_until_end(client, params={"last_event_id": 0})).data["status"] == "completed"
    run = client.get(f"/api/runs/{job}").json()
    # While here: what TRL logs at each evaluation is stored at the eval steps, with the eval loss.
    eval_steps = [s for s, loss in zip(run["metrics"]["steps"], run["metrics"]["eval_loss"]) if loss is not None]
    accuracy = run["metrics"]["extra"]["eval_mean_token_accuracy"]
    assert accuracy["steps"] == eval_steps and eval_steps and all(0 <= v <= 1 for v in accuracy["values"])
    caches = Path(run["output_dir"]) / ".cache" / "datasets"
    assert global_datasets_cache(user_home) == []
    # The caches were made in the run's folder and, the run being complete, removed again.
    assert caches.parent.is_dir() and not caches.exists()

    deleted = client.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})
    assert deleted.status_code == 200, deleted.text
    assert not Path(run["output_dir"]).exists()
    assert global_datasets_cache(user_home) == []


def test_a_preview_killed_at_its_timeout_leaves_no_folder(start_server, user_home, demo_assets, tmp_path):
    home = tmp_path / "home"
    # What a server that died mid-preview two days ago left, and another server's preview now.
    stale, live = home / "previews" / "preview-stale", home / "previews" / "preview-live"
    for folder in (stale, live):
        (folder / "json").mkdir(parents=True)
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(stale, (two_days_ago, two_days_ago))
    # The child cannot even finish its imports in this time.
    server = start_server(home=home, extra_env={"HOME": str(user_home), "TUNELAB_PREVIEW_TIMEOUT_S": "0.3"})
    answer = server.client().post("/api/datasets/preview", json={"local_datasets": [str(demo_assets.alpaca)]})
    assert answer.status_code == 504, answer.text
    assert list((home / "previews").iterdir()) == [live]
    assert global_datasets_cache(user_home) == []
