"""Text (causal language model) training: the SFT trainer, its LM head and packed attention."""
