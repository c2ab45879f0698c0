"""The built-in demos: one per family or objective, built offline from small local assets."""
