"""`tunelab train`'s torchrun-style flags, as `--set` overrides of the run config.

The flags are spelled as torchrun spells them (--nnodes, --node-rank, --master-addr,
--master-port, --rdzv-endpoint) so a command line from a cluster's docs carries over;
they only fill in the config's `nodes`, `num_gpus` and `num_processes`, so everything
is validated, stored and shown exactly as if it had been in the config file.
--rdzv-endpoint names the head's rendezvous like --master-addr/--master-port: tunelab
always starts torchrun's static rendezvous, so that global rank 0 is on the head
(layout.py says why).
"""

from __future__ import annotations

from typing import Any

NODE_FIELDS = {"nnodes": "count", "node_rank": "node_rank", "master_addr": "master_addr",
               "master_port": "master_port", "rdzv_endpoint": "rdzv_endpoint", "join_timeout": "join_timeout_s"}


def node_flags(**given: Any) -> list[str]:
    """`--set` items for the flags that were given (None = not given)."""
    items = [f"{name}={given[name]}" for name in ("num_gpus", "num_processes") if given.get(name) is not None]
    # Into `nodes` key by key: a config file that already says `nodes:` keeps the rest.
    return items + [f"nodes.{field}={given[flag]}" for flag, field in NODE_FIELDS.items() if given.get(flag) is not None]
