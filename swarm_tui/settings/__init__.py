"""The configuration (issue 33): sections.py (gateways, routing, SLA, canary) and
run_sections.py (retries, store, console, price overrides, alerts, telemetry), each table a
plain dataclass that pydantic validates (core/checks.py's markers); view.py, what the
commands that only read a store take from it, rebuilt without pydantic; loader.py, the
layers — flags, SWARM_TUI__* environment, the TOML file, defaults — as pydantic-settings
builds them, with one-line errors naming the place; schema.py, the JSON schema editors
validate config.toml with and the docs' reference page.

Imports nothing itself: `from swarm_tui.settings.sections import …` must load neither
pydantic nor the loader for the commands that need only a section."""
