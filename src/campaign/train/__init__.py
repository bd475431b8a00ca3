"""Before the run series: the user's training setup, and the checks on it (effective batch and accumulation)."""
