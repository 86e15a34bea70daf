"""OpenAI-compatible gateway access: clients, keys, error classification."""
