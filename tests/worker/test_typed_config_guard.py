"""The worker reads the run config by attribute, never by string key.

The child validates its payload into a `WorkerConfig` once at its entry
(`tunelab.worker.run_config`) and hands that object down; reading it as a mapping again
(`config.get("batch_size") or 1`) is how defaults used to be re-stated, differently from
RunConfig's. The run config goes by `config` (or `self.config`) throughout the worker;
other mappings have names of their own (`model_config` for a model's config.json,
`adapter_config`, `loop_config`), so a plain grep finds every read of the run config.
"""

from __future__ import annotations

import re
from pathlib import Path

import tunelab.worker

WORKER = Path(tunelab.worker.__file__).parent
STRING_KEY_READ = re.compile(r"\bconfig\.get\(|\bconfig\[")


def _string_key_reads(path: Path) -> list[str]:
    source = path.read_text()
    relative = path.relative_to(WORKER).as_posix()
    return [f"{relative}:{number}: {line.strip()}" for number, line in enumerate(source.splitlines(), 1)
            if STRING_KEY_READ.search(line)]


def test_no_worker_module_reads_the_run_config_by_string_key():
    found = [hit for path in sorted(WORKER.rglob("*.py")) for hit in _string_key_reads(path)]
    assert not found, "read the typed config's attributes instead (config.batch_size):\n" + "\n".join(found)


def test_the_guard_sees_a_string_key_read():
    """The pattern the guard looks for matches the reads it exists to stop."""
    for line in ('batch = int(config.get("batch_size") or 1)', 'name = config["model_name"]', 'self.config.get("seed")'):
        assert STRING_KEY_READ.search(line), line
    for line in ('model_config.get("model_type")', 'adapter_config["fine_tune_type"]', "config.batch_size"):
        assert not STRING_KEY_READ.search(line), line

