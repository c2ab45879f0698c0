"""Training objectives: the `Objective` Protocol (`protocol.py`), the registry by name
(`registry.py`: sft, dpo/orpo/simpo/kto, grpo), the methods that compose with a family
(`preference.py`, `grpo.py`) and the data shapes they read (`preference_formats.py`,
`preference_rows.py`, `prompt_formats.py`, with GRPO's rewards in `grpo_rewards.py`).
Kept free of imports: `worker/data/formats.py` reads the shapes from here.
"""
