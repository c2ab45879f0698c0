"""Speech-to-text (Whisper-style) models: data, prefix, collator, trainer."""
