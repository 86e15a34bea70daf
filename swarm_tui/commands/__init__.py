"""Sub-command implementations (argument parsing lives in swarm_tui.cli)."""
