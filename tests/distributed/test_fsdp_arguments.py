"""The Trainer arguments of a multi-rank run: under FSDP, gradient checkpointing goes to
FSDP (`fsdp_config.activation_checkpointing`), never to the Trainer's own
`activation_checkpointing`, which transformers warns adds a redundant all-gather to every
backward; under DDP and in one process it stays the Trainer's. The arguments are built by
the worker's own code and then given to TRL's real `SFTConfig`."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("torch")

from typed_config import typed
from tunelab.worker.model_setup import DeviceSettings  # noqa: E402
from tunelab.worker.trainer_setup import training_arguments  # noqa: E402

CHECKPOINTED = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=True)
PLAIN = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)


def _config(**changes):
    return {"model_name": "m", "learning_rate": 1e-4, "max_steps": 3, "batch_size": 2, "training_type": "full",
            "distributed": "auto", **changes}


def test_fsdp_checkpoints_through_its_own_config_and_not_the_trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun gives each rank
    args = training_arguments(typed(_config()), CHECKPOINTED, tmp_path, has_eval=False)
    assert args["fsdp"] == "full_shard auto_wrap"
    assert args["fsdp_config"]["activation_checkpointing"] is True
    assert args["activation_checkpointing"] is False and args["activation_checkpointing_kwargs"] is None
    off = training_arguments(typed(_config()), PLAIN, tmp_path, has_eval=False)
    assert off["fsdp_config"]["activation_checkpointing"] is False and off["activation_checkpointing"] is False
    # An adapter run that auto sharded (or that asked for FSDP) is the same.
    lora = training_arguments(typed(_config(training_type="lora", distributed="fsdp")), CHECKPOINTED, tmp_path, has_eval=False)
    assert lora["fsdp_config"]["activation_checkpointing"] is True and lora["activation_checkpointing"] is False


@pytest.mark.parametrize("world_size, distributed", [("1", "auto"), ("2", "ddp")])
def test_one_process_and_ddp_keep_the_trainers_checkpointing(tmp_path, monkeypatch, world_size, distributed):
    monkeypatch.setenv("WORLD_SIZE", world_size)
    args = training_arguments(typed(_config(training_type="lora", distributed=distributed)), CHECKPOINTED, tmp_path, has_eval=False)
    assert "fsdp" not in args
    assert args["activation_checkpointing"] is True and args["activation_checkpointing_kwargs"] == {"use_reentrant": False}


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_trl_takes_the_fsdp_arguments_without_the_redundant_all_gather_warning(tmp_path, monkeypatch):
    from trl import SFTConfig

    monkeypatch.setenv("WORLD_SIZE", "2")
    args = training_arguments(typed(_config()), CHECKPOINTED, tmp_path, has_eval=False)
    # Built outside torchrun here: with WORLD_SIZE set, accelerate would look for its other ranks.
    monkeypatch.delenv("WORLD_SIZE")
    # transformers' loggers do not propagate to the root logger: listen on its own.
    logger = logging.getLogger("transformers.training_args")
    kept, level = Kept(), logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.WARNING)
    try:
        built = SFTConfig(**args)
        assert built.fsdp and built.fsdp_plugin_args["activation_checkpointing"] is True
        assert not built.activation_checkpointing
        assert not [m for m in kept.messages if "AllGather" in m], kept.messages
        # The listener hears the warning where the Trainer's own checkpointing is asked for.
        SFTConfig(**{**args, "activation_checkpointing": True})
        assert [m for m in kept.messages if "AllGather" in m]
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
