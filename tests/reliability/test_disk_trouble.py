"""An output folder that cannot be written (read-only, or full by the first checkpoint):
the real worker fails with an error that names the output folder and what to do, and
the run is finalized as `error` — never left `running`, never a stack trace."""

from __future__ import annotations

import pytest

from disk_faults import full_folder, read_only_folder
from scenarios import run_to_end

pytestmark = pytest.mark.slow


def run_into(server, body) -> dict:
    ending = run_to_end(server, body)
    assert ending.worker_gone and ending.leftovers == []
    return ending.row


def assert_clear_disk_error(row: dict, folder) -> None:
    assert row["status"] == "error"
    message = row["error_message"]
    assert message.startswith("output_dir:"), message
    assert str(folder) in message
    assert "Traceback" not in message


def test_an_unwritable_output_folder_is_a_clear_error(start_server, demo_run, tmp_path):
    server = start_server()
    locked = server.home / "outputs" / "read-only"
    with read_only_folder(locked) as how:
        if how is None:
            pytest.skip("no way to make a folder unwritable for this user")
        row = run_into(server, demo_run(max_steps=4, output_dir="read-only/run"))
    assert_clear_disk_error(row, locked / "run")
    assert "read-only" in row["error_message"].lower() or "permission" in row["error_message"].lower()


def test_a_full_output_folder_is_a_clear_error(start_server, demo_run):
    server = start_server()
    folder = server.home / "outputs" / "full"
    with full_folder(folder, "run/checkpoint-2") as how:
        row = run_into(server, demo_run(max_steps=6, save_steps=2, output_dir="full/run"))
    if how.startswith("no mount rights"):
        # The stand-in fault: the save meets a file where its folder should go.
        assert row["status"] == "error" and "checkpoint-2" in row["error_message"]
    else:
        assert_clear_disk_error(row, folder / "run")
        assert "ran out of space" in row["error_message"]
    assert row["metrics"]["steps"][:2] == [1, 2]  # what was trained before the save failed is kept
