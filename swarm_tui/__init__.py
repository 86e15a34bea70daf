"""swarm-tui: a terminal operations console for LLM agent swarms."""

__version__ = "0.1.0"
