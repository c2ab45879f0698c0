"""Tie a child process's life to its parent's, for children in their own session.

torchrun runs in a session of its own (so a terminal's Ctrl-C reaches it only as the
parent's decision), which also means nothing ends it when its parent dies. Passed as
`preexec_fn`, `die_with_parent` asks the Linux kernel to SIGKILL the child the moment its
parent goes, however the parent goes (killed, crashed); torchrun's ranks, each watching
its own parent, follow within a second. Elsewhere it does nothing.
"""

from __future__ import annotations

import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's own watch and the ranks' watches remain
