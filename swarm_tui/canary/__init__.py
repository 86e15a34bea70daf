"""Canary rollouts: state, analysis, persistence and the auto-mode controller."""
