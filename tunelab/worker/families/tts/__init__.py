"""Orpheus-style text-to-speech over SNAC codec tokens: data, codec, cache, trainer and samples."""
