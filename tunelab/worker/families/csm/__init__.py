"""Sesame CSM text-to-speech: its data, model pieces, trainer and family."""
