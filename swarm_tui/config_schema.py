"""Print the config's JSON schema (shipped as swarm_tui/data/config.schema.json, for editors
that validate config.toml): `python -m swarm_tui.config_schema > swarm_tui/data/…`."""

from __future__ import annotations

import json

from swarm_tui.config import Settings


def main() -> None:
    print(json.dumps(Settings.model_json_schema(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
