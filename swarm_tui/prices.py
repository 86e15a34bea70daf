"""The price table: data, not code. USD per million tokens, per model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from swarm_tui.core.checks import STRICT, Finite, Limits, checked, first_error
from swarm_tui.core.record import record
from swarm_tui.digest import sha256_hex
from swarm_tui.errors import UserError

PER_MTOK = 1_000_000.0
# USD per million tokens; finite: TOML writes `inf`, and an infinite price turns every
# total into $inf
PerMillion = Annotated[float, Limits(ge=0), Finite()]


@record(frozen=True, kw_only=True)
class Price:
    """One model's price: USD per million tokens in, out and cached in."""

    __pydantic_config__ = STRICT

    input: PerMillion
    output: PerMillion
    cached_input: PerMillion | None = None
    source: str
    checked: str | None = None

    def cost(self, tokens_in: int, tokens_out: int, cached_in: int = 0) -> float:
        """USD for one call. Cached prompt tokens are billed at the cached rate, not as fresh."""
        cached = min(cached_in, tokens_in)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return (
            (tokens_in - cached) * self.input + cached * cached_rate + tokens_out * self.output
        ) / PER_MTOK


class PriceTable:
    def __init__(self, prices: dict[str, Price], file_digest: str | None = None) -> None:
        self.prices = prices
        self.file_digest = file_digest  # SHA-256 of the price file's bytes, if one was read

    def get(self, model: str) -> Price | None:
        """Exact name, else the name after a provider prefix (`moonshot/kimi-k2.5`)."""
        p = self.prices.get(model)
        if p is None and "/" in model:
            p = self.prices.get(model.rsplit("/", 1)[1])
        return p

    def cost(self, model: str, tokens_in: int, tokens_out: int, cached_in: int = 0) -> float | None:
        """None means unpriced — never shown or summed as $0."""
        p = self.get(model)
        return None if p is None else p.cost(tokens_in, tokens_out, cached_in)


def _parse(data: dict[str, Any], place: str) -> dict[str, Price]:
    from pydantic import ValidationError

    models = data.get("models", {})
    if not isinstance(models, dict):
        raise UserError(f"{place}: models: must be a table of [models.\"name\"] entries")
    out: dict[str, Price] = {}
    for name, entry in models.items():
        try:
            out[name] = checked(Price, entry)
        except ValidationError as e:
            key, msg, _more = first_error(e)
            raise UserError(f"{place}: models.{name}.{key}: {msg}") from None
    return out


def _load_file(path: Path) -> tuple[dict[str, Price], str]:
    """The file's prices and the SHA-256 of the very bytes they came from."""
    import tomllib  # here: a reader given a validated copy of the prices parses no TOML

    place = f"price file {path}"
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8-sig"))  # a BOM is not TOML's concern
    except FileNotFoundError:
        raise UserError(f"{place}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{place}: cannot read: {e.__class__.__name__}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{place}: invalid TOML: {e}") from None
    return _parse(data, place), sha256_hex(raw)


def shipped_prices() -> dict[str, Price]:
    import tomllib
    from importlib import resources

    text = resources.files("swarm_tui").joinpath("data/prices.toml").read_text("utf-8")
    return _parse(tomllib.loads(text), "shipped price file")


def load_price_table(
    prices_file: Path | None, overrides: dict[str, dict[str, Any]], place: str
) -> PriceTable:
    prices = shipped_prices()
    digest = None
    if prices_file is not None:
        from_file, digest = _load_file(prices_file)
        prices.update(from_file)
    if overrides:
        prices.update(_parse({"models": overrides}, place + " [prices]"))
    return PriceTable(prices, digest)
