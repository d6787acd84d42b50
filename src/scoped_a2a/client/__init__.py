"""The client side: calling A2A agents, following trajectories, steps."""
