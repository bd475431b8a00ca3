"""GPU rental prices: per card an hourly on-demand price and packages of N days holding K cards, read from a YAML
(or JSON) price file. Money is exact: integer cents inside, parsed from decimal text, never a float sum."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..results import Record
from ..validate import JsonObject

EXAMPLE_PRICES = "prices.yaml"      # the bundled example file (campaign/plan/prices.yaml): example data, dated


def load_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """A YAML (or JSON, a subset of YAML) file parsed with PyYAML's safe loader; a missing file or a syntax error
    is one InputError naming the file (and the line)."""
    from ..io import input_file

    p = input_file(path, what)
    try:
        import yaml
    except ImportError:
        raise MissingDependencyError("pyyaml", "all") from None
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not valid UTF-8 (byte {e.start + 1}); save the {what} as UTF-8") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise InputError(f"{p}: not valid YAML ({problem}{where}); fix the {what}'s syntax") from None
    except RecursionError:
        raise InputError(f"{p}: nested too deeply to read; this is not a {what}") from None
    except ValueError as e:          # an integer of more than 4,300 digits (Python's conversion limit)
        raise InputError(f"{p}: not readable ({str(e).split(';')[0]}); fix the {what}") from None


def cents(value: Any, where: str, field: str) -> int:
    """An amount of money ('2.49', 2.49, 149) as whole cents, exactly: decimal text is read as written (a YAML
    float goes through its shortest repr, so 2.49 is 249 cents, never 248.99...). Half a cent rounds up."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{where}: field {field!r} must be an amount such as '2.49', got {value!r}")
    try:
        amount = Decimal(str(value).strip().lstrip("$").replace(",", ""))
    except InvalidOperation:
        raise InputError(f"{where}: field {field!r} is not an amount ({value!r}); write e.g. '2.49'") from None
    if not amount.is_finite() or amount < 0 or amount > 10**12:
        raise InputError(f"{where}: field {field!r} must be an amount from 0 to 10^12 USD, got {value!r}")
    return int((amount * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def usd(amount_cents: int) -> str:
    """Cents as '$1,234.56' (exact: integer arithmetic, no float)."""
    sign = "-" if amount_cents < 0 else ""
    whole, part = divmod(abs(amount_cents), 100)
    return f"{sign}${whole:,}.{part:02d}"


@dataclass(frozen=True)
class Package:
    """A rental: `cards` cards of one model for `days` days (24-hour days), for `price_cents` in all."""

    name: str
    days: int
    cards: int
    price_cents: int

    @property
    def hours(self) -> int:
        return self.days * 24


@dataclass(frozen=True)
class CardPrices(Record):
    """One card's prices: on demand per card-hour (None: not sold by the hour) and its packages."""

    card: str
    hourly_cents: int | None
    packages: tuple[Package, ...]


@dataclass(frozen=True)
class PriceFile(Record):
    """A price file: where the prices come from and when they were taken; `example` marks illustrative data."""

    path: str
    source: str
    date: str
    example: bool
    currency: str
    cards: tuple[CardPrices, ...]

    def for_card(self, card: str) -> CardPrices:
        """The prices of one card (a catalog name or alias); InputError naming the file when it has none."""
        from ..hardware import find_card

        name = find_card(card).name if _known(card) else card
        for c in self.cards:
            if c.card == name:
                return c
        listed = ", ".join(c.card for c in self.cards)
        raise InputError(f"{self.path}: no prices for card {name!r} (it lists {listed}); add it to the price file "
                         f"or pass --prices FILE")

    def package(self, card: str, name: str) -> Package:
        """A card's package by name; InputError naming the file when the file lacks it."""
        prices = self.for_card(card)
        for p in prices.packages:
            if p.name == name:
                return p
        listed = ", ".join(p.name for p in prices.packages) or "none"
        raise InputError(f"{self.path}: card {prices.card!r} has no package {name!r} (it has {listed}); add it to "
                         f"the price file or pick one of those")


def _known(card: str) -> bool:
    from ..errors import UnknownNameError
    from ..hardware import find_card

    try:
        find_card(card)
        return True
    except (UnknownNameError, InputError):
        return False


def example_prices_path() -> Path:
    """The bundled example price file (illustrative, dated; see its header)."""
    return Path(str(resources.files("campaign.plan") / EXAMPLE_PRICES))


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceFile:
    """Read a price file (the bundled example when path is None).

    Format (YAML or JSON): source, date, example (bool), currency (USD), cards: a list of {card, hourly,
    packages: [{name, days, cards, price}]}; amounts as decimal text ('2.49'). Each card must be in the catalog
    (campaign cards) or a custom name.

    Raises:
        InputError: one line naming the file and the field.
    """
    from ..hardware import find_card

    p = Path(path) if path is not None else example_prices_path()
    where = str(path) if path is not None else f"the example price file ({p.name})"
    fix = "see examples/plan/prices.yaml for the format"
    doc = JsonObject(load_yaml(p, "price file"), where, fix=fix)
    currency = doc.str("currency", "USD")
    if currency != "USD":
        doc.fail(f"field 'currency' is {currency!r}; only USD prices are read")
    cards: list[CardPrices] = []
    for entry in doc.items("cards"):
        card = entry.str("card")
        name = find_card(card).name if _known(card) else card
        hourly = cents(entry.raw("hourly"), entry.where, "hourly") if "hourly" in entry else None
        packages: list[Package] = []
        for pk in entry.items("packages") if "packages" in entry else []:
            days = pk.count("days", minimum=1, maximum=3660)
            count = pk.count("cards", 1, minimum=1, maximum=4096)
            packages.append(Package(pk.str("name", f"{days}-day"), days, count, cents(pk.raw("price"), pk.where,
                                                                                         "price")))
        names = [pk.name for pk in packages]
        if len(set(names)) != len(names):
            entry.fail(f"package names repeat ({', '.join(names)}); give each package its own name")
        if hourly is None and not packages:
            entry.fail("neither 'hourly' nor 'packages': nothing to price")
        if any(c.card == name for c in cards):
            entry.fail(f"card {name!r} is listed twice; keep one entry per card")
        cards.append(CardPrices(name, hourly, tuple(packages)))
    if not cards:
        doc.fail("field 'cards' is empty; list at least one card with its prices")
    return PriceFile(str(path) if path is not None else str(p), str(doc.raw("source", "")), str(doc.raw("date", "")),
                     bool(doc.raw("example", False)), currency, tuple(cards))


def hourly_cost(hourly_cents: int, cards: int, hours: float) -> int:
    """On demand: each card billed per started hour, so ceil(hours) x cards x the hourly price (cents, exact)."""
    return math.ceil(round(hours, 9)) * cards * hourly_cents
