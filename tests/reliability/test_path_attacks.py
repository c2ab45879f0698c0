"""Paths that try to leave the folders tunelab manages — `..`, absolute paths, symlinks
planted inside a managed folder — in every field that names a file or folder, at the
start and preview routes and through delete-with-artifacts. Each is refused with a 4xx
naming the field, and a canary outside is never read, changed or removed.

The server runs `reads_what_it_is_given`, a fake worker that reads every path of its
config and writes to its output folder, so a path that slipped through would show in
the canary's atime or content."""

from __future__ import annotations

import pytest

from canary import Canary, atime_is_tracked
from harness import worker_env
from path_attacks import attack_delete, attack_table, plant_escape_links, send_attacks


@pytest.fixture
def attacked(start_server, tmp_path):
    server = start_server(extra_env=worker_env("fault_workers:reads_what_it_is_given"))
    canary = Canary.plant(tmp_path / "outside")
    plant_escape_links(server.home, canary)
    return server, canary


def test_paths_leading_outside_are_refused_and_the_canary_is_untouched(attacked, demo_run):
    server, canary = attacked
    client = server.client()
    attempts = send_attacks(client, demo_run, attack_table(server.home, canary))
    assert len(attempts) >= 30
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
