"""How many processes a run trains in, where, and which engine starts them.

A run is one process (`single`), several started by torchrun on one or more nodes
(`torchrun`), or workers placed by Ray Train on a Ray cluster (`ray`). tunelab writes
no launcher and no collective of its own: this module only decides the layout from the
config and the GPUs the run was given, and builds torchrun's command line. Torch-free,
so the config checks, the orchestrator and the CLI can all use it.

Across nodes, global rank 0 (the rank that saves checkpoints, writes the run's facts
and exports) must be on the head, the node that records the run. torchrun's static
rendezvous numbers nodes by `--node-rank`; its c10d rendezvous numbers them by host name
and process id, so rank 0 could land on another machine whose output folder the head
never sees. Every multi-node launch is therefore a static rendezvous hosted by the head,
`nodes.rdzv_endpoint` included (it names the head's address like master_addr/port).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping

ENGINES = ("single", "torchrun", "ray")
# The module torchrun (and Ray Train) runs in every rank.
RANK_MODULE = "tunelab.worker.launch.rank_entry"
DIST_TIMEOUT_ENV = "TUNELAB_DIST_TIMEOUT_S"
DEFAULT_DIST_TIMEOUT_S = 300
# ray_address set where Ray is not installed: the parent's precheck finds it (looking Ray up,
# never importing it) and the Ray launcher in the worker, each refusing with these words.
RAY_NOT_INSTALLED = ("Ray is not installed in this Python environment; install it with `pip install 'tunelab[cluster]'` "
                     "(here and on every node of the cluster), or remove ray_address to train on this machine")


@dataclass(frozen=True)
class Layout:
    engine: str
    processes_per_node: int
    nodes: int = 1
    node_rank: int = 0
    strategy: str = "none"  # "none" (one process) | "ddp" | "fsdp"

    @property
    def world_size(self) -> int:
        return self.processes_per_node * self.nodes

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0


def layout_errors(cfg: Any) -> list[tuple[str, str]]:
    """What no machine could run, found from the config alone (field, fix)."""
    errs: list[tuple[str, str]] = []
    if cfg.gpu_ids and cfg.num_gpus:
        errs.append(("num_gpus", "set gpu_ids (which GPUs) or num_gpus (how many, chosen by free memory), not both"))
    if cfg.nodes and cfg.ray_address:
        errs.append(("ray_address", "a Ray cluster places the workers itself; remove nodes, or remove ray_address for plain torchrun nodes"))
    if cfg.ray_address and cfg.gpu_ids:
        errs.append(("gpu_ids", "on a Ray cluster Ray picks the GPUs; use num_gpus instead of gpu_ids"))
    if cfg.distributed == "fsdp" and cfg.load_in_4bit:
        errs.append(("distributed", "QLoRA trains over a replicated 4-bit base with DDP; set distributed=ddp (or auto)"))
    nodes = cfg.nodes
    if nodes is not None:
        if nodes.node_rank >= nodes.count:
            errs.append(("nodes.node_rank", f"node_rank {nodes.node_rank} is not below nodes.count={nodes.count}; ranks run 0..{nodes.count - 1}"))
        if not nodes.master_addr and not nodes.rdzv_endpoint:
            errs.append(("nodes.master_addr", "set nodes.master_addr (the head's address, with nodes.master_port) or nodes.rdzv_endpoint (host:port)"))
        if nodes.rdzv_endpoint and not _host_port(nodes.rdzv_endpoint):
            errs.append(("nodes.rdzv_endpoint", f"{nodes.rdzv_endpoint!r} is not host:port, e.g. 10.0.0.1:29400"))
    return errs


def _host_port(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (host, int(port)) if host and port.isdigit() and 0 < int(port) < 65536 else None


def strategy_for(config: Mapping[str, Any], world_size: int) -> str:
    """DDP for adapter runs (the base is small next to nothing it replicates), FSDP2 for
    full fine-tuning, where every rank holding whole weights, gradients and optimizer
    state is what runs out of memory first."""
    if world_size <= 1:
        return "none"
    chosen = config.get("distributed") or "auto"
    if chosen != "auto":
        return chosen
    return "ddp" if config.get("training_type", "lora") in ("lora", "qlora") else "fsdp"


# An adapter run in DDP holds the whole base on every GPU, plus activations, adapter
# gradients and optimizer state; below this much headroom over the weights it is FSDP's.
DDP_HEADROOM = 1.3


def strategy_for_memory(config: Mapping[str, Any], world_size: int, weight_bytes: int | None,
                        free_bytes_per_gpu: int | None) -> tuple[str, str | None]:
    """`strategy_for`, plus auto's second rule: an adapter run whose base does not fit one
    GPU is sharded with FSDP2 (a 4-bit base always stays on DDP). Returns the strategy and,
    when the memory rule chose it, why."""
    chosen = strategy_for(config, world_size)
    if ((config.get("distributed") or "auto") != "auto" or chosen != "ddp" or config.get("load_in_4bit")
            or not weight_bytes or not free_bytes_per_gpu):
        return chosen, None
    if weight_bytes * DDP_HEADROOM <= free_bytes_per_gpu:
        return chosen, None
    return "fsdp", (f"the base model's weights ({weight_bytes / 2**30:.1f} GiB) do not fit one GPU's free memory "
                    f"({free_bytes_per_gpu / 2**30:.1f} GiB) with room to train, so FSDP2 shards them over {world_size} GPUs")


def plan(config: Mapping[str, Any], visible_gpus: int) -> Layout:
    """The layout of a run given the number of GPUs its process can see (the orchestrator
    pins them through CUDA_VISIBLE_DEVICES before the worker starts)."""
    if config.get("ray_address"):
        workers = int(config.get("num_gpus") or config.get("num_processes") or 1)
        return Layout("ray", workers, strategy=strategy_for(config, workers))
    per_node = visible_gpus if visible_gpus > 0 else int(config.get("num_processes") or 1)
    nodes = config.get("nodes") or {}
    count = int(nodes.get("count") or 1)
    world = per_node * count
    engine = "torchrun" if world > 1 or count > 1 else "single"
    return Layout(engine, per_node, count, int(nodes.get("node_rank") or 0), strategy_for(config, world))


def recorded_world_size(config: Mapping[str, Any]) -> int:
    """The world size a stored run config asked for (the GPUs it named or counted, else
    its processes per node, times its nodes)."""
    per_node = len(config.get("gpu_ids") or []) or int(config.get("num_gpus") or 0) or int(config.get("num_processes") or 1)
    return per_node * int((config.get("nodes") or {}).get("count") or 1)


class NodeDevicesError(ValueError):
    """A node's CUDA_VISIBLE_DEVICES cannot give each of its ranks a device of its own."""


def visible_gpu_count(env: Mapping[str, str]) -> int:
    """How many devices CUDA_VISIBLE_DEVICES shows this node (one rank each). Several of
    which one is a MIG slice are refused: CUDA shows a process only one MIG slice, so every
    rank past the first would find no device."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
    if len(devices) > 1 and any(d.startswith("MIG-") for d in devices):
        raise NodeDevicesError(
            f"CUDA_VISIBLE_DEVICES={visible!r} names several devices of which some are MIG slices; CUDA shows a "
            "process only one MIG slice and a node starts one training process per device: give this node a "
            "single slice or only whole GPUs")
    return len(devices)


def rendezvous_address(nodes: Mapping[str, Any]) -> tuple[str, int]:
    """(host, port) of the head's rendezvous: `rdzv_endpoint`, else master_addr/master_port."""
    endpoint = nodes.get("rdzv_endpoint")
    if endpoint:
        host, _, port = str(endpoint).rpartition(":")
        return host, int(port)
    return str(nodes["master_addr"]), int(nodes.get("master_port") or 29500)


class DistTimeoutError(ValueError):
    """TUNELAB_DIST_TIMEOUT_S is not a usable number of seconds."""


def dist_timeout_s(env: Mapping[str, str]) -> int:
    """How long a rank waits on a peer in one collective before it fails the run.
    transformers' own default is 30 minutes: a dead or frozen node would hold every
    other rank that long. Also the bound on a collective that waits for one rank's slow
    work (rank 0 saving a large checkpoint to slow storage): raise it for those."""
    text = (env.get(DIST_TIMEOUT_ENV) or "").strip()
    if not text:
        return DEFAULT_DIST_TIMEOUT_S
    if not text.isdigit() or int(text) < 1:
        raise DistTimeoutError(f"{DIST_TIMEOUT_ENV}={text!r} is not a whole number of seconds of at least 1; "
                         f"set e.g. {DIST_TIMEOUT_ENV}={DEFAULT_DIST_TIMEOUT_S}, or unset it for that default")
    return int(text)


def torchrun_command(layout: Layout, config: Mapping[str, Any], config_path: str, log_dir: str) -> list[str]:
    """torchrun's command line for this layout; the ranks run `RANK_MODULE config_path`."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(layout.processes_per_node),
            # A failed rank fails the run: a restart would retrain from the last checkpoint
            # behind the user's back; resume is the user's decision.
            "--max-restarts", "0", "--log-dir", log_dir]
    nodes = config.get("nodes") or {}
    if layout.nodes == 1:
        argv += ["--standalone"]
    else:
        # Static, also for an rdzv_endpoint: global ranks follow node ranks, so global
        # rank 0 is the head's first local rank (see the module's docstring).
        host, port = rendezvous_address(nodes)
        argv += ["--nnodes", str(layout.nodes), "--node-rank", str(layout.node_rank),
                 "--master-addr", host, "--master-port", str(port),
                 "--rdzv-conf", f"timeout={int(nodes.get('join_timeout_s') or 300)}"]
    return argv + ["-m", RANK_MODULE, config_path]
