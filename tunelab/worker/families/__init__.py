"""Model families on the training side: one folder per family, and the registry that picks one."""
