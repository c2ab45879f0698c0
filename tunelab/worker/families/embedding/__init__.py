"""Embedding models on sentence-transformers: data shapes, losses, evaluators and trainer."""
