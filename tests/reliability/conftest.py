"""Fixtures of the reliability suite: the server tests' live-server launcher and demo run
bodies, reused from tests/server/conftest.py (loaded by `harness`) rather than copied."""

from __future__ import annotations

from harness import load_server_harness

_server = load_server_harness()
start_server = _server.start_server
demo_run = _server.demo_run
