"""How many processes a run trains in, where, and which engine starts them.

A run is one process (`single`), several started by torchrun on one or more nodes
(`torchrun`), or workers placed by Ray Train on a Ray cluster (`ray`). tunelab writes
no launcher and no collective of its own: this module only decides the layout from the
config and the GPUs the run was given, and builds torchrun's command line. Torch-free,
so the config checks, the orchestrator and the CLI can all use it.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from typing import Any, Mapping

ENGINES = ("single", "torchrun", "ray")
# The module torchrun (and Ray Train) runs in every rank.
RANK_MODULE = "tunelab.worker.rank_entry"


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


def visible_gpu_count(env: Mapping[str, str]) -> int:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return len([d for d in visible.split(",") if d.strip()]) if visible else 0


def rendezvous_id(endpoint: str) -> str:
    """The same on every node without any of them telling the others: from the endpoint."""
    return "tunelab-" + hashlib.sha256(endpoint.encode()).hexdigest()[:12]


def torchrun_command(layout: Layout, config: Mapping[str, Any], config_path: str, log_dir: str) -> list[str]:
    """torchrun's command line for this layout; the ranks run `RANK_MODULE config_path`."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(layout.processes_per_node),
            # A failed rank fails the run: a restart would retrain from the last checkpoint
            # behind the user's back; resume is the user's decision.
            "--max-restarts", "0", "--log-dir", log_dir]
    nodes = config.get("nodes") or {}
    if layout.nodes == 1:
        argv += ["--standalone"]
    elif nodes.get("rdzv_endpoint"):
        endpoint = nodes["rdzv_endpoint"]
        argv += ["--nnodes", str(layout.nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", rendezvous_id(endpoint), "--rdzv-conf", f"join_timeout={int(nodes.get('join_timeout_s') or 300)}"]
    else:
        argv += ["--nnodes", str(layout.nodes), "--node-rank", str(layout.node_rank),
                 "--master-addr", str(nodes["master_addr"]), "--master-port", str(nodes.get("master_port") or 29500),
                 "--rdzv-conf", f"timeout={int(nodes.get('join_timeout_s') or 300)}"]
    return argv + ["-m", RANK_MODULE, config_path]
