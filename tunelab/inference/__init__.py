"""Talking to a trained run: chat, compare with the base, and OpenAI-style serving.

The model runs in a child process of its own (`child`, `generate`: the only modules here
that import torch); the parent side (`target`, `devices`, `client`, `host`, `chat_cli`)
is torch-free, so the CLI and the server use it directly.
"""
