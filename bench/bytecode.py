"""Compile tunelab's bytecode before a benchmark's clock runs, as pip does when it installs
a package. The machines these benchmarks run on set PYTHONDONTWRITEBYTECODE, so without
this every process that imports tunelab (the server, each worker, the CLI) compiles every
module edited since its .pyc was last written: a cost no installed copy pays, and one the
libraries it is compared with (installed by pip, bytecode included) never pay."""

from __future__ import annotations

import compileall
from pathlib import Path


def like_an_install() -> None:
    import tunelab

    compileall.compile_dir(str(Path(tunelab.__file__).parent), quiet=1)
