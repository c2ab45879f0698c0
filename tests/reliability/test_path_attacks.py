"""Paths that try to leave the folders tunelab manages — `..`, absolute paths, `~`,
`file://`, NUL bytes, symlinks planted inside a managed folder, hub-id-shaped names that
exist in the server's working folder — in every field that can name a file or folder
(dataset, local_datasets, local_eval_datasets, model_name, resume_from, output_dir,
tensorboard_dir, mlflow_tracking_uri, tts_codec), at the start and preview routes and through
delete-with-artifacts. Each is refused with a 4xx naming the field, and a canary
outside (the server's working folder) is never read, changed or removed.

The server runs `reads_what_it_is_given`, a fake worker that reads every path of its
config and writes where the trainer would, so a path that slipped through would show
in the canary's atime or content; previews run the real preview child."""

from __future__ import annotations

import pytest

from canary import Canary, atime_is_tracked
from harness import worker_env
from path_attacks import attack_delete, attack_table, plant_escape_links, send_attacks

# Every RunConfig field that can name a local path (an S3 endpoint is a URL, not a path).
PATH_FIELDS = {"dataset", "local_datasets", "local_eval_datasets", "model_name", "resume_from", "output_dir",
               "tensorboard_dir", "mlflow_tracking_uri", "tts_codec"}


@pytest.fixture
def attacked(start_server, tmp_path):
    canary = Canary.plant(tmp_path / "outside")
    server = start_server(extra_env=worker_env("fault_workers:reads_what_it_is_given"), cwd=canary.root)
    plant_escape_links(server.home, canary)
    return server, canary


def test_paths_leading_outside_are_refused_and_the_canary_is_untouched(attacked, demo_run):
    server, canary = attacked
    client = server.client()
    table = attack_table(server.home, canary)
    assert set(table) == PATH_FIELDS
    attempts = send_attacks(client, demo_run, table)
    assert len(attempts) >= 80
    assert [a for a in attempts if not a.refused_naming_the_field] == []
    assert client.get("/api/runs").json()["total"] == 0  # no attack started a run
    assert canary.changes() == []


def test_delete_with_artifacts_never_follows_a_link_out(attacked, demo_run):
    server, canary = attacked
    outcome = attack_delete(server.client(), demo_run, canary)
    assert outcome.swapped_status == 403 and outcome.swapped_error_field == "delete_artifacts"
    assert outcome.swapped_run_kept
    assert outcome.linked_status == 200 and outcome.linked_folder_removed
    assert canary.changes() == []


def test_the_canary_would_notice_a_read(tmp_path):
    """The checks above are only as good as the atime they read: on this filesystem a
    read of a planted file shows (skipped where the mount records no reads at all)."""
    if not atime_is_tracked(tmp_path):
        pytest.skip("this filesystem does not record reads (noatime); content and mtime are still checked")
    canary = Canary.plant(tmp_path / "outside")
    canary.data_file.read_bytes()
    assert canary.changes() == [f"read {canary.data_file}"]
