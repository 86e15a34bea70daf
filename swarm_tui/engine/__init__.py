"""The swarm engine: runs tasks through gateways and emits events. Never imports Textual."""
