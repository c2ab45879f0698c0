"""Runs over several ranks: the launcher, each rank's entry, and the torchrun and Ray engines."""
