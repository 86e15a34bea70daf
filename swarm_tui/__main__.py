from swarm_tui.cli import entry

entry()
