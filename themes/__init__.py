"""The shipped console themes (TOML), installed as the data package swarm_tui.themes."""
