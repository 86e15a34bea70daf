"""Print the config's JSON schema (shipped as swarm_tui/data/config.schema.json, for editors
that validate config.toml): `python -m swarm_tui.settings.schema > swarm_tui/data/…`; with
`--markdown`, the configuration reference page of the docs site
(`python -m swarm_tui.settings.schema --markdown > docs/configuration-reference.md`)."""

from __future__ import annotations

import json
import sys
from typing import Any

from swarm_tui.settings.loader import Settings


def _type(spec: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})" if "properties" in defs.get(name, {}) else name
    if "anyOf" in spec:
        return " or ".join(_type(s, defs) for s in spec["anyOf"] if s.get("type") != "null")
    if "enum" in spec:
        return " \\| ".join(f"`{v}`" for v in spec["enum"])
    if spec.get("type") == "array":
        return f"list of {_type(spec.get('items', {}), defs)}"
    if spec.get("type") == "object" and "additionalProperties" in spec:
        extra = spec["additionalProperties"]
        return f"table of {_type(extra, defs) if isinstance(extra, dict) else 'values'}"
    return str(spec.get("type", "any"))


def _default(spec: dict[str, Any]) -> str:
    if "default" not in spec:
        return ""
    value = spec["default"]
    return "" if value in (None, {}, []) else f"`{json.dumps(value)}`"


def _table(props: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    rows = ["| key | type | default | what it is |", "| --- | --- | --- | --- |"]
    for name, spec in props.items():
        what = " ".join(str(spec.get("description") or "").split())
        rows.append(f"| `{name}` | {_type(spec, defs)} | {_default(spec)} | {what} |")
    return rows


def markdown() -> str:
    schema = Settings.model_json_schema()
    defs = schema.get("$defs", {})
    out = ["# Configuration reference", "",
           "Generated from the settings model (`python -m swarm_tui.settings.schema --markdown`);",
           "the suite fails when this page and the model differ. The guide is",
           "[Configuration](configuration.md).", "", "## Top level", ""]
    out += _table(schema["properties"], defs)
    for name in sorted(defs):
        d = defs[name]
        if "properties" not in d:
            continue
        out += ["", f"## {name}", ""]
        if d.get("description"):
            out += [" ".join(d["description"].split()), ""]
        out += _table(d["properties"], defs)
    return "\n".join(out) + "\n"


def main() -> None:
    if "--markdown" in sys.argv[1:]:
        print(markdown(), end="")
        return
    print(json.dumps(Settings.model_json_schema(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
