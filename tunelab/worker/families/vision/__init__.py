"""Vision-language models: image data, formats, collator and model loading."""
