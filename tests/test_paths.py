"""paths.py: the one place that decides which paths a user may name."""

from __future__ import annotations

import os

import pytest

from tunelab import paths
from tunelab.paths import PathNotAllowed


def test_home_layout_follows_tunelab_home(home):
    assert paths.home() == home
    assert paths.outputs_root() == home / "outputs" and paths.db_path() == home / "tunelab.db"


def test_output_dir_must_stay_inside_the_root(home, tmp_path):
    inside = paths.resolve_output_dir("my-run", "label", allow_outside=False)
    assert inside == paths.outputs_root() / "my-run"
    for bad in ("../escape", str(tmp_path / "elsewhere"), "."):
        with pytest.raises(PathNotAllowed) as info:
            paths.resolve_output_dir(bad, "label", allow_outside=False)
        assert info.value.field == "output_dir"
    assert paths.resolve_output_dir(str(tmp_path / "elsewhere"), "x", allow_outside=True) == tmp_path / "elsewhere"


def test_a_symlink_inside_the_root_cannot_lead_out(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, paths.outputs_root() / "link")
    with pytest.raises(PathNotAllowed):
        paths.resolve_output_dir("link/run", "label", allow_outside=False)
    with pytest.raises(PathNotAllowed):
        paths.check_readable(str(paths.outputs_root() / "link"), "local_datasets")


def test_reads_are_confined_to_the_data_roots(home, tmp_path, monkeypatch):
    data = paths.datasets_root() / "train.jsonl"
    data.write_text("{}\n")
    assert paths.check_readable("train.jsonl", "local_datasets") == data
    secret = tmp_path / "canary.txt"
    secret.write_text("keep out")
    for bad in (str(secret), "../../canary.txt", "/etc/passwd"):
        with pytest.raises(PathNotAllowed) as info:
            paths.check_readable(bad, "local_datasets")
        assert info.value.field == "local_datasets" and "TUNELAB_DATA_ROOTS" in str(info.value)
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path))
    assert paths.check_readable(str(secret), "local_datasets") == secret


def test_remove_inside_never_follows_links_or_leaves_the_root(home, tmp_path):
    canary_dir = tmp_path / "canary"
    canary_dir.mkdir()
    (canary_dir / "precious.txt").write_text("x")
    run = paths.outputs_root() / "run"
    (run / "tmp-checkpoint-3").mkdir(parents=True)
    os.symlink(canary_dir, run / "tmp-checkpoint-3" / "link")
    os.symlink(canary_dir, run / "tmp-checkpoint-4")
    assert paths.remove_inside(run / "tmp-checkpoint-4") is False  # a link itself is never removed
    assert paths.remove_inside(run / "tmp-checkpoint-3") is True
    assert paths.remove_inside(canary_dir) is False
    assert paths.remove_inside(paths.outputs_root()) is False
    assert (canary_dir / "precious.txt").read_text() == "x"


def test_new_output_dirs_are_unique(home):
    first = paths.new_output_dir("same label")
    first.mkdir()
    assert paths.new_output_dir("same label") != first
