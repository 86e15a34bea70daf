from __future__ import annotations

import pytest

from swarm_tui.errors import UserError
from swarm_tui.prices import load_price_table
from swarm_tui.settings.loader import load_config

GOOD = """
default_gateway = "prod"
[gateways.prod]
base_url = "https://gw.example.com/v1/"
key_env = ["PROD_KEY"]
timeout_s = 12
[retry]
max_attempts = 4
[prices."my-model"]
input = 1.0
output = 2.0
"""


def write(tmp_path, text: str):
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_good_config_and_env_override(tmp_path, monkeypatch):
    p = write(tmp_path, GOOD)
    monkeypatch.setenv("SWARM_TUI__RETRY__MAX_ATTEMPTS", "6")
    cfg = load_config(str(p))
    s = cfg.settings
    assert s.gateways["prod"].base_url == "https://gw.example.com/v1"
    assert s.gateways["prod"].timeout_s == 12
    assert s.retry.max_attempts == 6  # environment wins over the file
    assert cfg.prices.get("my-model").output == 2.0
    assert cfg.prices.get("kimi-k2.5").input == 0.15  # shipped table still there
    assert not cfg.simulated_only


@pytest.mark.parametrize(("text", "expected"), [
    ("[gateways.prod]\nbase_url = 'ftp://x'\n", r"gateways\.prod\.base_url: Value error, must"),
    ("[retry]\nmax_attempts = 0\n", r"retry\.max_attempts: Input should be greater"),
    ("[sla]\np95_msx = 3\n", r"sla\.p95_msx: unknown key"),
    ("concurrency = 'lots'\n", r"concurrency: Input should be a valid integer"),
    ("x = [\n", r"invalid TOML"),
    ("default_gateway = 'nope'\n", r"default_gateway: no gateway named 'nope'"),
    ("[gateways.sim]\nbase_url = 'http://x'\n", r"gateways: Value error, 'sim' is reserved"),
    ("[prices.m]\ninput = -1\noutput = 1\n", r"prices\.m\.input: Input should be greater"),
    # a link in every page: no credential may ride in it
    ("[alerts]\nconsole_url = 'https://u:p@h'\n", r"alerts\.console_url: Value error, must be"),
    ("[alerts]\nconsole_url = 'https://h/?token=x'\n", r"alerts\.console_url: Value error"),
    ("[alerts]\nconsole_url = 'localhost:8000'\n", r"alerts\.console_url: Value error"),
])
def test_invalid_config_names_file_and_key(tmp_path, text, expected):
    p = write(tmp_path, text)
    with pytest.raises(UserError, match=expected) as info:
        load_config(str(p))
    msg = str(info.value)
    assert str(p) in msg and "\n" not in msg and info.value.exit_code == 2


def test_missing_explicit_config(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        load_config(str(tmp_path / "nope.toml"))


def test_no_config_means_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SWARM_TUI_CONFIG", raising=False)
    cfg = load_config(None)
    assert cfg.path is None and cfg.simulated_only


def test_price_file_errors_name_the_file(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."x"]\ninput = 1\n')
    p = write(tmp_path, f'prices_file = "{prices}"\n')
    with pytest.raises(UserError, match=r"price file .*prices.toml: models.x.output: Field req"):
        load_config(str(p))


def test_unpriced_model_is_none_not_zero():
    table = load_price_table(None, {}, "t")
    assert table.cost("no-such-model", 1000, 1000) is None
    # cached input billed at the cached rate: DeepSeek 0.28 fresh / 0.028 cached / 0.42 out
    assert table.cost("deepseek-v3.2", 1_000_000, 1_000_000, cached_in=500_000) == pytest.approx(
        0.5 * 0.28 + 0.5 * 0.028 + 0.42)
    assert table.cost("provider/kimi-k2.5", 1_000_000, 0) == pytest.approx(0.15)


def test_shipped_example_config_is_valid():
    import pathlib

    example = pathlib.Path(__file__).parent.parent.parent / "examples" / "config.toml"
    cfg = load_config(str(example))
    assert set(cfg.settings.gateways) == {"prod", "direct"}
    assert cfg.prices.get("my-finetune").cached_input == 0.05


def test_the_shipped_json_schema_is_the_settings_model_and_fits_the_example():
    """swarm_tui/data/config.schema.json is what editors validate config.toml with: it must
    be the model's own schema (regenerate: python -m swarm_tui.settings.schema >
    swarm_tui/data/config.schema.json) and the shipped example must validate."""
    import json
    import pathlib
    import tomllib

    from swarm_tui.settings.loader import Settings

    root = pathlib.Path(__file__).parent.parent.parent
    shipped = json.loads((root / "swarm_tui" / "data" / "config.schema.json").read_text())
    assert shipped == json.loads(json.dumps(Settings.model_json_schema())), (
        "the shipped schema is stale: python -m swarm_tui.settings.schema > "
        "swarm_tui/data/config.schema.json")
    example = tomllib.loads((root / "examples" / "config.toml").read_text())
    Settings.model_validate(example)  # raises on any unknown or bad key
    # every top-level key of the example is described in the schema
    assert set(example) <= set(shipped["properties"])


def test_a_bad_user_theme_is_skipped_and_reported_not_fatal(tmp_path):
    from swarm_tui.ui.themes import load_themes_reporting

    (tmp_path / "broken.toml").write_text('name = "mine"\nprimary = 3\ncolour = "x"\n')
    (tmp_path / "good.toml").write_text('name = "mine-ok"\nprimary = "#ff0000"\n')
    themes, problems = load_themes_reporting(tmp_path)
    assert "mine-ok" in themes and "mine" not in themes and "swarm-dark" in themes
    assert len(problems) == 1 and "broken.toml" in problems[0] and "skipped" in problems[0]


def test_flags_are_the_top_layer_over_env_and_file(tmp_path, monkeypatch):
    p = write(tmp_path, 'concurrency = 40\nbudget_usd = 3.0\n' + GOOD +
              '[ui]\ntheme = "swarm-light"\nkeys = { "run.pause" = "P" }\n')
    monkeypatch.setenv("SWARM_TUI__CONCURRENCY", "60")
    s = load_config(str(p)).settings
    assert (s.concurrency, s.budget_usd, s.ui.theme) == (60, 3.0, "swarm-light")  # env > file
    s = load_config(str(p), {"concurrency": 7, "budget": 0.5, "theme": "swarm-ansi",
                             "refresh": 1.0}).settings
    assert (s.concurrency, s.budget_usd, s.ui.theme, s.ui.refresh_s) == (
        7, 0.5, "swarm-ansi", 1.0)  # flags > env > file
    assert s.ui.keys == {"run.pause": "P"}  # `--theme` merges into [ui], never replaces it
    s = load_config(str(p), {"concurrency": None, "budget": None}).settings
    assert s.concurrency == 60  # a flag not given is no layer at all


@pytest.mark.parametrize(("flags", "expected"), [
    ({"concurrency": 0}, "--concurrency: Input should be greater than or equal to 1"),
    ({"budget": -1.0}, "--budget: Input should be greater than 0"),
    ({"refresh": 60.0}, "--refresh: Input should be less than or equal to 10"),
])
def test_a_bad_flag_is_named_as_the_flag(tmp_path, flags, expected):
    with pytest.raises(UserError) as e:
        load_config(str(write(tmp_path, GOOD)), flags)
    assert str(e.value) == expected


def test_a_bad_file_value_is_still_named_in_the_file_when_flags_are_given(tmp_path):
    p = write(tmp_path, "tasks_per_day = 0\n" + GOOD)
    with pytest.raises(UserError) as e:
        load_config(str(p), {"concurrency": 5})
    assert str(e.value).startswith(f"config {p}: tasks_per_day: ")


def test_a_config_and_a_price_file_with_a_bom_load(tmp_path):
    """Notepad saves UTF-8 with a BOM: that is no `invalid TOML` at line 1, column 1."""
    prices = tmp_path / "prices.toml"
    prices.write_bytes(b'\xef\xbb\xbf[models."x"]\r\ninput = 1\r\noutput = 2\r\n'
                       b'source = "our contract"\r\n')
    p = tmp_path / "c.toml"
    p.write_bytes(b"\xef\xbb\xbf" + f'prices_file = "{prices}"\r\n'.encode()
                  + GOOD.replace("\n", "\r\n").encode())
    cfg = load_config(str(p))
    assert cfg.settings.retry.max_attempts == 4 and cfg.prices.get("x").output == 2.0


@pytest.mark.parametrize(("text", "expected"), [
    ('[prices."m"]\ninput = inf\noutput = 1\n', "prices.m.input: Input should be a finite"),
    ("budget_usd = inf\n", "budget_usd: Input should be a finite number"),
    ('[gateways.g]\nbase_url = "http://x/v1"\ntimeout_s = inf\n',
     "gateways.g.timeout_s: Input should be a finite number"),
])
def test_infinity_is_no_price_budget_or_timeout(tmp_path, text, expected):
    """TOML writes `inf`: a price of inf made every total $inf, a budget of inf no cap."""
    with pytest.raises(UserError, match=expected):
        load_config(str(write(tmp_path, text)))


def test_infinity_in_a_price_file_or_a_flag_is_refused(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."x"]\ninput = inf\noutput = 1\nsource = "s"\n')
    with pytest.raises(UserError, match=r"price file .*: models.x.input: Input should be a fin"):
        load_config(str(write(tmp_path, f'prices_file = "{prices}"\n')))
    with pytest.raises(UserError, match=r"--budget: Input should be a finite number"):
        load_config(str(write(tmp_path, "")), {"budget": float("inf")})
