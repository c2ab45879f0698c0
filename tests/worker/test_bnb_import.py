"""bnb_import: bitsandbytes is imported without torch's compiler, and the kernels it
wraps in `torch.compile` are compiled at their first call, once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tunelab.worker.bnb_import import _compile_on_first_call


def test_compiling_waits_for_the_first_call_and_happens_once():
    compiled: list[tuple[str, dict]] = []

    def real(fn, **options):
        compiled.append((fn.__name__, options))
        return lambda *args, **kwargs: ("compiled", fn(*args, **kwargs))

    deferred = _compile_on_first_call(real)

    @deferred(dynamic=False)  # with options, as bitsandbytes writes it
    def double(x):
        return 2 * x

    def square(x):
        return x * x

    plain = deferred(square)  # without
    assert compiled == [] and double.__name__ == "double"
    assert double(3) == ("compiled", 6) and double(4) == ("compiled", 8)
    assert plain(5) == ("compiled", 25)
    assert compiled == [("double", {"dynamic": False}), ("square", {})]


def test_importing_bitsandbytes_leaves_the_inductor_unloaded_and_torch_compile_as_it_was():
    pytest.importorskip("bitsandbytes")
    probe = ("import sys, torch; real = torch.compile; import tunelab.worker.bnb_import; "
             "print('bitsandbytes' in sys.modules, 'torch._inductor.compile_fx' in sys.modules, torch.compile is real)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False", "True"], done.stdout + done.stderr[-3000:]
