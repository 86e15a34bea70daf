"""A stored run in time order, for replays at any moment (issue 35)."""
