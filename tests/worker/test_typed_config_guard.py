"""The worker reads the run config by attribute, never by string key.

The child validates its payload into a `WorkerConfig` once at its entry
(`tunelab.worker.run_config`) and hands that object down; reading it as a mapping again
(`config.get("batch_size") or 1`) is how defaults used to be re-stated, differently from
RunConfig's. The run config goes by `config` (or `self.config`) throughout the worker;
other mappings have names of their own (`model_config`, `adapter_config`, `loop_config`).
The only dict called `config` is a model's own config.json, read by the TTS layout marker
reader, listed below by function (the families' `config_dict_is_*` tests live in
`tunelab/families`, outside the worker).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tunelab.worker

WORKER = Path(tunelab.worker.__file__).parent
STRING_KEY_READ = re.compile(r"\bconfig\.get\(|\bconfig\[")
# (file under tunelab/worker, function): its `config` is a model's config.json dict.
MODEL_CONFIG_DICT_READERS = {
    ("families/tts/layout.py", "codebook_size_of"),
}


def _string_key_reads(path: Path) -> list[str]:
    source = path.read_text()
    relative = path.relative_to(WORKER).as_posix()
    allowed_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and (relative, node.name) in MODEL_CONFIG_DICT_READERS:
            allowed_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [f"{relative}:{number}: {line.strip()}" for number, line in enumerate(source.splitlines(), 1)
            if STRING_KEY_READ.search(line) and number not in allowed_lines]


def test_no_worker_module_reads_the_run_config_by_string_key():
    found = [hit for path in sorted(WORKER.rglob("*.py")) for hit in _string_key_reads(path)]
    assert not found, "read the typed config's attributes instead (config.batch_size):\n" + "\n".join(found)


def test_the_guard_sees_a_string_key_read():
    """The pattern the guard looks for matches the reads it exists to stop."""
    for line in ('batch = int(config.get("batch_size") or 1)', 'name = config["model_name"]', 'self.config.get("seed")'):
        assert STRING_KEY_READ.search(line), line
    for line in ('model_config.get("model_type")', 'adapter_config["fine_tune_type"]', "config.batch_size"):
        assert not STRING_KEY_READ.search(line), line


def test_every_listed_exception_still_exists():
    """A function moved or renamed must leave the list, so the list cannot hide new reads."""
    for relative, name in MODEL_CONFIG_DICT_READERS:
        path = WORKER / relative
        assert path.is_file(), relative
        names = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}
        assert name in names, f"{relative} has no function {name}"
