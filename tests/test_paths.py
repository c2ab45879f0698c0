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


def test_names_longer_than_the_file_system_allows_are_refused_not_raised(home):
    """Python 3.11 raises ENAMETOOLONG from Path.exists(); every check refuses first."""
    checks = {
        "output_dir": lambda v: paths.resolve_output_dir(v, "label", allow_outside=False),
        "local_datasets": lambda v: paths.check_readable(v, "local_datasets"),
        "model_name": lambda v: paths.check_model_source(v),
        "dest": lambda v: paths.resolve_export_dir(v),
    }
    for field, check in checks.items():
        for value in ("n" * 300, "org/" + "n" * 256, "/tmp/" + "deep/" * 900):
            with pytest.raises(PathNotAllowed) as info:
                check(value)
            assert info.value.field == field
            assert "longer than this file system allows" in str(info.value) and "use a shorter path" in str(info.value)
    assert paths.exists("x" * 300) is False and paths.is_dir("/tmp/" + "x" * 300) is False
    assert paths.remove_inside(paths.outputs_root() / ("x" * 300)) is False


def test_file_urls_and_home_relative_paths_are_read_as_the_paths_they_name(home, tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("{}\n")
    for value in (f"file://{outside}", f"file:{outside}", "~/" + os.path.relpath(outside, os.path.expanduser("~"))):
        with pytest.raises(PathNotAllowed):
            paths.check_readable(value, "local_datasets")
        with pytest.raises(PathNotAllowed):
            paths.check_hub_or_local(value, "dataset")
    inside = paths.datasets_root() / "in.jsonl"
    inside.write_text("{}\n")
    assert paths.check_readable(f"file://{inside}", "local_datasets") == inside
    assert paths.resolve_write_dir(f"file://{paths.outputs_root()}/tb", "tensorboard_dir", False) == paths.outputs_root() / "tb"
    with pytest.raises(PathNotAllowed) as info:
        paths.check_readable("file:///tmp/a%00b", "local_datasets")
    assert "NUL" in str(info.value)
    # An unknown user's `~name` is no home folder at all: a plain name in the datasets root.
    assert paths.check_readable("~no-such-user-here/d.jsonl", "local_datasets").parent.parent == paths.datasets_root()


def test_hub_ids_pass_and_local_names_in_the_working_folder_are_checked(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "data").mkdir(parents=True)
    assert paths.check_hub_or_local("acme/other", "dataset") == "acme/other"
    with pytest.raises(PathNotAllowed) as info:
        paths.check_hub_or_local("acme/data", "dataset")
    assert info.value.field == "dataset"
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path))
    assert paths.check_hub_or_local("acme/data", "dataset") == str(tmp_path / "acme" / "data")
