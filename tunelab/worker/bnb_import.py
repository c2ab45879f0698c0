"""Import bitsandbytes without loading torch's compiler at import time.

PEFT imports bitsandbytes whenever it is installed, so every training process imports it,
QLoRA or not. bitsandbytes wraps a few of its CPU kernels in `torch.compile` as its module
loads, and `torch.compile` looks up the inductor's settings on the spot, which imports
all of `torch._inductor`: about a third of a LoRA worker's start-up on two CPU cores, for
kernels a run on CUDA, or a run without quantization, never calls. While bitsandbytes
loads, `torch.compile` is replaced by one that compiles on the first call instead:
compiling happens at the first call anyway, and a compile that fails then still falls
back to the plain kernel (bitsandbytes catches it at the call as it would at import).

`import_bitsandbytes()` must run before anything imports peft; the torch backend calls it
first thing, and the prewarmed worker's import list names this module before peft.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from typing import Any, Callable

_lock = threading.Lock()


def import_bitsandbytes() -> None:
    """Import bitsandbytes (when installed and not yet imported) with compiling deferred."""
    if "bitsandbytes" in sys.modules or importlib.util.find_spec("bitsandbytes") is None:
        return
    import torch

    with _lock:
        real = torch.compile
        torch.compile = _compile_on_first_call(real)
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            pass  # peft treats a broken bitsandbytes as absent; so does a run without quantization
        finally:
            torch.compile = real


def _compile_on_first_call(real: Callable[..., Any]) -> Callable[..., Any]:
    def deferred(model: Any = None, **options: Any) -> Any:
        if model is None:  # used as @torch.compile(**options)
            return lambda fn: deferred(fn, **options)
        compiled = None

        @functools.wraps(model)
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal compiled
            if compiled is None:
                compiled = real(model, **options)
            return compiled(*args, **kwargs)

        return call

    return deferred


import_bitsandbytes()  # importing this module is the import (the prewarmed worker lists modules to import)
