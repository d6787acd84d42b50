"""Runs: the agent's context, the run policy, the runner that owns runs, and log tailing."""
