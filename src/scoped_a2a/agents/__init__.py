"""Agents that ship with scoped-a2a."""
