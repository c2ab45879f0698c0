"""Memory planning: estimating what a run needs and fitting it to the devices."""
