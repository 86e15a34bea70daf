"""The configuration (issue 33): sections.py, the models of each table (plain pydantic);
loader.py, the layers — flags, SWARM_TUI__* environment, the TOML file, defaults — as
pydantic-settings builds them, with one-line errors naming the place; schema.py, the JSON
schema editors validate config.toml with and the docs' reference page.

Imports nothing itself: `from swarm_tui.settings.sections import …` must not load the
loader (pydantic-settings) for the commands that need only a section's model."""
