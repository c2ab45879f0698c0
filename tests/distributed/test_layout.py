"""The layout of a run (one process, torchrun ranks, Ray workers) and torchrun's command
line, from the config alone; what no machine could run is refused by `parse_config`,
naming the field and the fix."""

from __future__ import annotations

import sys

import pytest

from tunelab import layout
from tunelab.config.run_config import ConfigError, parse_config

BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"]}
HEAD = {"count": 2, "master_addr": "10.0.0.1"}


def errors_of(**overrides):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **overrides})
    return {e.field: e.message for e in info.value.errors}


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"gpu_ids": [0, 1], "num_gpus": 2}, "num_gpus", "not both"),
        ({"distributed": "fsdp", "training_type": "qlora", "load_in_4bit": True}, "distributed", "distributed=ddp"),
        ({"nodes": {"count": 2}}, "nodes.master_addr", "nodes.rdzv_endpoint"),
        ({"nodes": {**HEAD, "node_rank": 2}}, "nodes.node_rank", "0..1"),
        ({"nodes": {"count": 2, "rdzv_endpoint": "head-without-port"}}, "nodes.rdzv_endpoint", "host:port"),
        ({"nodes": {"count": 2, "rdzv_endpoint": "head:99999"}}, "nodes.rdzv_endpoint", "host:port"),
        ({"nodes": HEAD, "ray_address": "auto"}, "ray_address", "remove nodes"),
        ({"ray_address": "auto", "gpu_ids": [0, 1]}, "gpu_ids", "num_gpus"),
    ],
)
def test_layouts_no_machine_can_run_are_refused_naming_the_field(overrides, field, words):
    errors = errors_of(**overrides)
    assert field in errors, errors
    assert words in errors[field]


@pytest.mark.parametrize("field, value", [("num_processes", 2), ("num_gpus", 2), ("nodes", HEAD), ("ray_address", "auto")])
def test_the_mlx_backend_refuses_more_than_one_process(field, value):
    errors = errors_of(backend="mlx", **{field: value})
    assert field in errors and "one process" in errors[field] and "backend=torch" in errors[field]


def test_the_mlx_backend_accepts_one_process():
    assert parse_config({**BASE, "backend": "mlx", "num_processes": 1}).num_processes == 1


@pytest.mark.parametrize(
    "config, visible_gpus, engine, world, strategy",
    [
        ({}, 0, "single", 1, "none"),
        ({"num_processes": 2}, 0, "torchrun", 2, "ddp"),
        ({"num_processes": 2, "training_type": "full"}, 0, "torchrun", 2, "fsdp"),
        ({"num_processes": 2, "training_type": "full", "distributed": "ddp"}, 0, "torchrun", 2, "ddp"),
        ({"num_processes": 3}, 4, "torchrun", 4, "ddp"),  # with GPUs: one process per visible GPU
        ({}, 1, "single", 1, "none"),
        ({"nodes": {**HEAD, "node_rank": 1}}, 2, "torchrun", 4, "ddp"),
        ({"nodes": HEAD}, 0, "torchrun", 2, "ddp"),  # one CPU process on each of two nodes
        ({"ray_address": "auto", "num_gpus": 3}, 0, "ray", 3, "ddp"),
    ],
)
def test_plan_follows_the_config_and_the_visible_gpus(config, visible_gpus, engine, world, strategy):
    plan = layout.plan(config, visible_gpus)
    assert (plan.engine, plan.world_size, plan.strategy) == (engine, world, strategy)
    assert plan.is_head == (plan.node_rank == 0)


def test_visible_gpus_are_counted_from_cuda_visible_devices():
    assert layout.visible_gpu_count({}) == 0
    assert layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "2,3"}) == 2
    assert layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "MIG-a1b2"}) == 1


def _flags(argv: list[str]) -> dict[str, str | bool]:
    """torchrun's own options (before `-m`) as {flag: value, or True for a switch}."""
    own = argv[3:argv.index("-m", 3)]
    flags: dict[str, str | bool] = {}
    for i, word in enumerate(own):
        if word.startswith("--"):
            following = own[i + 1] if i + 1 < len(own) else None
            flags[word] = following if following is not None and not following.startswith("--") else True
    return flags


def test_torchrun_command_on_one_node_is_standalone():
    config = {"num_processes": 2}
    argv = layout.torchrun_command(layout.plan(config, 0), config, "/run/rank-config.json", "/run/logs")
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[-3:] == ["-m", layout.RANK_MODULE, "/run/rank-config.json"]
    flags = _flags(argv)
    assert flags["--standalone"] is True
    assert flags["--nproc-per-node"] == "2"
    assert flags["--max-restarts"] == "0"  # a failed rank fails the run; no silent retraining
    assert flags["--log-dir"] == "/run/logs"
    assert "--nnodes" not in flags and "--rdzv-endpoint" not in flags


def test_torchrun_command_for_static_nodes_names_the_head():
    config = {"nodes": {**HEAD, "node_rank": 1, "master_port": 29501}}
    flags = _flags(layout.torchrun_command(layout.plan(config, 2), config, "/c.json", "/logs"))
    assert (flags["--nnodes"], flags["--node-rank"], flags["--nproc-per-node"]) == ("2", "1", "2")
    assert (flags["--master-addr"], flags["--master-port"]) == ("10.0.0.1", "29501")
    assert "--standalone" not in flags and "--rdzv-backend" not in flags


def test_an_rdzv_endpoint_is_the_heads_static_rendezvous_so_node_rank_orders_global_ranks():
    """c10d would number nodes by host name and process id, putting global rank 0 (which
    saves checkpoints and records facts) on whichever machine sorts first."""
    for node_rank in (0, 1):
        config = {"nodes": {"count": 2, "node_rank": node_rank, "rdzv_endpoint": "10.0.0.1:29400"}}
        flags = _flags(layout.torchrun_command(layout.plan(config, 1), config, "/c.json", "/logs"))
        assert (flags["--nnodes"], flags["--node-rank"]) == ("2", str(node_rank))
        assert (flags["--master-addr"], flags["--master-port"]) == ("10.0.0.1", "29400")
        assert "--rdzv-backend" not in flags and "--rdzv-endpoint" not in flags and "--standalone" not in flags


@pytest.mark.parametrize("value", ["0", "-5", "2.5", "five minutes"])
def test_a_bad_collective_timeout_is_refused_naming_the_variable(value):
    with pytest.raises(layout.DistTimeoutError) as info:
        layout.dist_timeout_s({layout.DIST_TIMEOUT_ENV: value})
    assert layout.DIST_TIMEOUT_ENV in str(info.value) and repr(value) in str(info.value)


def test_the_collective_timeout_defaults_to_minutes_not_transformers_half_hour():
    assert layout.dist_timeout_s({}) == layout.DEFAULT_DIST_TIMEOUT_S <= 600
    assert layout.dist_timeout_s({layout.DIST_TIMEOUT_ENV: " 20 "}) == 20


def test_a_node_shown_several_devices_of_which_one_is_a_mig_slice_is_refused():
    # CUDA shows a process one MIG slice: a second rank on this node would find no device.
    with pytest.raises(layout.NodeDevicesError, match="MIG"):
        layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "MIG-GPU-8d1e5f0a-1b2c-4d3e-9f00-aa11bb22cc33/1/0,0"})
    assert layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "MIG-8d1e5f0a-1b2c-4d3e-9f00-aa11bb22cc33"}) == 1
    assert layout.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert layout.visible_gpu_count({}) == 0
