"""The floor every layer may stand on: it imports nothing of swarm_tui's own."""
