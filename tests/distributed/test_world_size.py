"""A checkpoint knows how many ranks saved it (one RNG state file each), and a start that
would resume it on another world size is refused before anything starts, naming
num_processes, the checkpoint's world size and the fix. Checkpoints made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_factory import make_checkpoint, write_torch_zip

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.config.run_config import ConfigError
from tunelab.demos.text import demo_config


def _with_rng_states(folder: Path, names: list[str]) -> Path:
    for name in names:
        write_torch_zip(folder / name)
    return folder


@pytest.mark.parametrize(
    "rng_files, world_size",
    [
        ([], 1),  # the MLX backend saves none
        (["rng_state.pth"], 1),
        (["rng_state_0.pth", "rng_state_1.pth"], 2),
        (["rng_state_0.pth", "rng_state_1.pth", "rng_state_2.pth", "rng_state_3.pth"], 4),
        (["rng_state_0.pth", "rng_state_1.pth", "rng_state_0.pth.bak", "rng_state_x.pth"], 2),
    ],
)
def test_a_checkpoint_counts_the_ranks_that_saved_it(tmp_path, rng_files, world_size):
    folder = _with_rng_states(make_checkpoint(tmp_path, 4), rng_files)
    assert validate_checkpoint(folder).world_size == world_size


def _checkpoint_in_outputs(step: int, rng_files: list[str]) -> Path:
    run_folder = paths.outputs_root() / "earlier-run"
    run_folder.mkdir(parents=True, exist_ok=True)
    return _with_rng_states(make_checkpoint(run_folder, step), rng_files)


def test_a_two_rank_checkpoint_is_not_resumed_in_one_process(real_orchestrator, store, demo_assets):
    orch, _ = real_orchestrator
    checkpoint = _checkpoint_in_outputs(3, ["rng_state_0.pth", "rng_state_1.pth"])
    with pytest.raises(ConfigError) as info:
        orch.start(demo_config(demo_assets, steps=6, resume_from=str(checkpoint)))
    [error] = info.value.errors
    assert error.field == "num_processes"
    assert "world size 2" in error.message and "would train with 1" in error.message
    assert "set num_processes=2" in error.message
    assert store.count_runs() == 0 and not orch.is_training_active()  # nothing started, nothing recorded


def test_a_one_process_checkpoint_is_not_resumed_on_two_ranks(real_orchestrator, store, demo_assets):
    orch, _ = real_orchestrator
    checkpoint = _checkpoint_in_outputs(3, ["rng_state.pth"])
    config = {**demo_config(demo_assets, steps=6).public(), "num_processes": 2, "resume_from": str(checkpoint)}
    with pytest.raises(ConfigError) as info:
        orch.start(config)
    [error] = info.value.errors
    assert error.field == "num_processes"
    assert "world size 1" in error.message and "would train with 2" in error.message
    assert "leave num_processes out" in error.message
    assert store.count_runs() == 0
