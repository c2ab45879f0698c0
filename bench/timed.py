"""Run one command, time-stamping each output line, and report the peak RSS of its processes.

    python bench/timed.py OUT.json -- command args...

Writes OUT.json: {"argv", "started", "ended", "returncode", "peak_rss_mb", "lines": [[ts, line], ...]}
(ts: time.time() when the line arrived; stdout and stderr merged). The peak RSS is
getrusage(RUSAGE_CHILDREN).ru_maxrss of this process once the command is waited for: the
largest resident set of any single process in the command's tree (a child's reaped
children count toward it), measured fresh per command because this wrapper runs only one.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def main(out: str, argv: list[str]) -> int:
    started = time.time()
    lines: list[tuple[float, str]] = []
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in process.stdout:
        lines.append((time.time(), line.rstrip("\n")))
    code = process.wait()
    ended = time.time()
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    with open(out, "w") as f:
        json.dump({"argv": argv, "started": started, "ended": ended, "returncode": code,
                   "peak_rss_mb": peak_kb / 1024, "lines": lines}, f)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python bench/timed.py OUT.json -- command args...")
    sys.exit(main(sys.argv[1], sys.argv[3:]))
