"""Audio chat models (a language model that listens): data, formats, collator and family."""
