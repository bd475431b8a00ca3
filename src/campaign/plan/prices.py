"""GPU rental prices: per card an hourly on-demand price and packages of N days holding K cards, read from a YAML
(or JSON) price file. Money is exact: decimal cents as written (0.347 $/h is 34.7 cents), never a float, rounded
once at a total (billing.py)."""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..results import Record
from ..validate import JsonObject
from .billing import NO_TERMS, Terms
from .money import round_cents

EXAMPLE_PRICES = "prices.yaml"      # the bundled example file (campaign/plan/prices.yaml): example data, dated
BILLING = {"per-hour": "hour", "per-minute": "minute", "per-second": "second"}
MAX_TERM_HOURS = 24 * 366   # a minimum billed or a set-up time longer than a year is a typo


def known_keys(obj: JsonObject, allowed: tuple[str, ...] | list[str]) -> None:
    """Refuse a key the format does not have, with the nearest valid one: "'afer': did you mean 'after'?"."""
    for key in obj.data:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys here are {', '.join(allowed)}"
        raise InputError(f"{obj.where}: unknown key {str(key)!r}: {hint}" + (f" ({obj.fix})" if obj.fix else ""))


def load_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """A YAML (or JSON, a subset of YAML) file read by the one strict parser every config goes through
    (strict_json.parse_yaml: UTF-8, no aliases, bounded nesting and integers); a missing file or any failure is one
    InputError naming the file (and the line). what: 'plan', 'price', 'cost', 'factors'."""
    from ..io import input_file
    from ..strict_json import parse_yaml

    p = input_file(path, what)
    try:
        import yaml  # noqa: F401  # parse_yaml imports it; a missing extra is said here, by name
    except ImportError:
        raise MissingDependencyError("pyyaml", "all") from None
    return parse_yaml(p.read_bytes(), f"{p} (the {what} file)")


def cents(value: Any, where: str, field: str) -> int:
    """An amount of money ('2.49', 2.49, 149) as whole cents: exact_cents rounded half up (for budgets)."""

    return round_cents(exact_cents(value, where, field))


def exact_cents(value: Any, where: str, field: str) -> Decimal:
    """An amount of money ('0.347', 2.49, 149) as exact decimal cents: decimal text is read as written (a YAML
    float goes through its shortest repr, so 2.49 is 249 cents, never 248.99...; '0.347' is 34.7 cents)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{where}: field {field!r} must be an amount such as '2.49', got {value!r}")
    try:
        amount = Decimal(str(value).strip().lstrip("$").replace(",", ""))
    except InvalidOperation:
        raise InputError(f"{where}: field {field!r} is not an amount ({value!r}); write e.g. '2.49'") from None
    if not amount.is_finite() or amount < 0 or amount > 10**12:
        raise InputError(f"{where}: field {field!r} must be an amount from 0 to 10^12 USD, got {value!r}")
    return amount * 100


@dataclass(frozen=True)
class Package:
    """A rental: `cards` cards of one model for `days` days (24-hour days), for `price_cents` in all (the exact
    amount in `price`, decimal cents)."""

    name: str
    days: int
    cards: int
    price_cents: int
    price: Decimal | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "days": self.days, "cards": self.cards, "price_cents": self.price_cents,
                "price_exact_cents": str(self.exact)}

    @property
    def exact(self) -> Decimal:
        return self.price if self.price is not None else Decimal(self.price_cents)

    @property
    def hours(self) -> int:
        return self.days * 24


@dataclass(frozen=True)
class CardPrices(Record):
    """One card's prices: on demand per card-hour (None: not sold by the hour; hourly_cents rounded, `hourly` the
    exact decimal cents) and its packages."""

    card: str
    hourly_cents: int | None
    packages: tuple[Package, ...]
    hourly: Decimal | None = None
    billing: str | None = None              # this card's billing unit (hour | minute | second); None: the file's
    terms: Terms = NO_TERMS                 # minimum billed, set-up, storage (billing.Terms)
    offer: str | None = None                # the offer's name, when the card is rented under several (prices.offer)

    def to_dict(self) -> dict[str, Any]:
        t = self.terms
        return {"card": self.card, "offer": self.offer, "hourly_cents": self.hourly_cents,
                "hourly_exact_cents": None if self.hourly_exact is None else str(self.hourly_exact),
                "packages": [p.to_dict() for p in self.packages], "billing": self.billing,
                "minimum_hours": t.minimum_hours, "setup_hours": t.setup_hours,
                "storage_hourly_exact_cents": None if t.storage_hourly is None else str(t.storage_hourly)}

    @property
    def label(self) -> str:
        """The card with its offer, as --card and a phase's card name it: 'H100-SXM-80GB@community'."""
        return offer_label(self.card, self.offer)

    @property
    def hourly_exact(self) -> Decimal | None:
        if self.hourly is not None:
            return self.hourly
        return None if self.hourly_cents is None else Decimal(self.hourly_cents)


@dataclass(frozen=True)
class PriceFile(Record):
    """A price file: where the prices come from and when they were taken; `example` marks illustrative data."""

    path: str
    source: str
    date: str
    example: bool
    currency: str
    cards: tuple[CardPrices, ...]
    billing: str = "hour"                  # on-demand time billed per started hour | minute | second

    def unit(self, card: CardPrices) -> str:
        """How the card's on-demand time is billed: its own billing, else the file's."""
        return card.billing or self.billing

    def offers(self, card: str) -> tuple[CardPrices, ...]:
        """Every offer of one card (a catalog name or alias, or 'CARD@OFFER' for that offer alone), in the file's
        order; InputError naming the file when it has none (or not that offer, with the offers it has)."""
        name, offer = split_offer(card)
        name = find_card_name(name)
        entries = tuple(c for c in self.cards if c.card == name)
        if not entries:
            listed = ", ".join(dict.fromkeys(c.card for c in self.cards))
            raise InputError(f"{self.path}: no prices for card {name!r} (its 'cards' list {listed}); add it to the "
                             f"price file or pass --prices FILE")
        if offer is None:
            return entries
        for c in entries:
            if c.offer == offer:
                return (c,)
        named = [c.offer for c in entries if c.offer is not None]
        close = difflib.get_close_matches(offer, named, n=1, cutoff=0.6)
        has = f"its offers: {', '.join(named)}" if named else "its entry has no 'offer' name"
        raise InputError(f"{self.path}: card {name!r} has no offer {offer!r} ({has})"
                         + (f"; did you mean {offer_label(name, close[0])!r}?" if close else
                            f"; name one as {offer_label(name, named[0])!r}" if named else
                            f"; drop '@{offer}' or add 'offer: {offer}' to its entry"))

    def for_card(self, card: str) -> CardPrices:
        """The prices of one card (a catalog name or alias; 'CARD@OFFER' for one of its offers): without an offer
        named, its first entry in the file. InputError naming the file when it has none."""
        return self.offers(card)[0]

    def package(self, card: str, name: str) -> Package:
        """A card's package by name; InputError naming the file when the file lacks it."""
        prices = self.for_card(card)
        for p in prices.packages:
            if p.name == name:
                return p
        listed = ", ".join(p.name for p in prices.packages) or "none"
        raise InputError(f"{self.path}: card {prices.card!r} has no package {name!r} (it has {listed}); add it to "
                         f"the price file or pick one of those")


OFFER_SEP = "@"      # 'H100-SXM-80GB@community': a card and one of its offers, in --card and a phase's card


def split_offer(ref: str) -> tuple[str, str | None]:
    """'CARD@OFFER' as (card, offer); 'CARD' as (card, None)."""
    card, sep, offer = ref.partition(OFFER_SEP)
    return card.strip(), (offer.strip() if sep else None)


def offer_label(card: str, offer: str | None) -> str:
    """A card with its offer as --card and a phase's card write it: 'H100-SXM-80GB@community' ('CARD' alone when
    the entry has no offer name)."""
    return card if offer is None else f"{card}{OFFER_SEP}{offer}"


def find_card_name(card: str) -> str:
    """A card's catalog name, or the name as written for a custom card."""
    from ..hardware import find_card

    return find_card(card).name if _known(card) else card


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
    return Path(__file__).with_name(EXAMPLE_PRICES)


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceFile:
    """Read a price file (the bundled example when path is None).

    Format (YAML or JSON): source, date, example (bool), currency (USD), billing (per-hour | per-minute |
    per-second: how on-demand time is billed, default per-hour), cards: a list of {card, offer, hourly, packages:
    [{name, days, cards, price}], billing (this card's, overriding the file's), minimum_hours or minimum_minutes
    (each on-demand card billed at least this; minutes exact: minimum_minutes: 1 is 60 s), setup_hours (billed
    before the first step, counted in every window), storage_hourly
    (billed from the start to the last run's end, idle or not)}; amounts as decimal text ('2.49', '0.347': kept
    exact). Each card must be in the catalog (campaign cards) or a custom name. A card rented under several offers
    (secure and community cloud, spot and on-demand, two providers) has an entry per offer, each with its own
    `offer` name and its own prices, billing and terms; two entries of one card without distinct offer names are
    refused.

    Raises:
        InputError: one line naming the file and the field (an unknown key with the nearest valid one).
    """
    p = Path(path) if path is not None else example_prices_path()
    where = str(path) if path is not None else f"the example price file ({p})"
    fix = f"see {example_prices_path()} for the format"
    doc = JsonObject(load_yaml(p, "price"), where, fix=fix)
    known_keys(doc, ("source", "date", "example", "currency", "billing", "cards"))
    currency = doc.str("currency", "USD")
    if currency != "USD":
        doc.fail(f"field 'currency' is {currency!r}; only USD prices are read")
    billing = doc.str("billing", "per-hour")
    if billing not in BILLING:
        doc.fail(f"field 'billing' is {billing!r}; use {', '.join(BILLING)}")
    cards: list[CardPrices] = []
    for position, entry in enumerate(doc.items("cards")):
        card = entry.str("card")
        offer = entry.str("offer") if "offer" in entry else None
        entry = JsonObject(entry.data, f"{where}: card {card!r}" + (f" offer {offer!r}" if offer is not None else ""),
                           fix=fix)
        known_keys(entry, ("card", "offer", "hourly", "packages", "billing", "minimum_hours", "minimum_minutes",
                           "setup_hours", "storage_hourly"))
        if OFFER_SEP in card:
            entry.fail(f"a card's name cannot hold {OFFER_SEP!r} (it separates a card from its offer); write the "
                       f"offer apart: card: {split_offer(card)[0]}, offer: {split_offer(card)[1]}")
        if offer is not None and (not offer.strip() or OFFER_SEP in offer or offer != offer.strip()):
            entry.fail(f"field 'offer' is {offer!r}; an offer's name is not blank and holds no {OFFER_SEP!r} and no "
                       "surrounding spaces, e.g. offer: community")
        name = card_name(card, where, "card")
        hourly = exact_cents(entry.raw("hourly"), entry.where, "hourly") if "hourly" in entry else None
        own = entry.str("billing", billing)
        if own not in BILLING:
            entry.fail(f"field 'billing' is {own!r}; use {', '.join(BILLING)}")
        hours = {}
        for key in ("minimum_hours", "setup_hours"):
            hours[key] = float(entry.number(key, 0.0, minimum=0))
            if hours[key] > MAX_TERM_HOURS:
                entry.fail(f"field {key!r} is {hours[key]:g}; at most {MAX_TERM_HOURS:,} hours (a year)")
        minimum_seconds = _minimum_seconds(entry)
        if minimum_seconds is not None:
            hours["minimum_hours"] = float(minimum_seconds / 3600)
        terms = Terms(hours["minimum_hours"], hours["setup_hours"],
                      exact_cents(entry.raw("storage_hourly"), entry.where, "storage_hourly")
                      if "storage_hourly" in entry else None, minimum_seconds)
        packages: list[Package] = []
        for pk in entry.items("packages") if "packages" in entry else []:
            known_keys(pk, ("name", "days", "cards", "price"))
            days = pk.count("days", minimum=1, maximum=3660)
            count = pk.count("cards", 1, minimum=1, maximum=4096)
            exact = exact_cents(pk.raw("price"), pk.where, "price")
            packages.append(Package(pk.str("name", f"{days}-day"), days, count, _rounded(exact), exact))
        names = [pk.name for pk in packages]
        if len(set(names)) != len(names):
            entry.fail(f"package names repeat ({', '.join(names)}); give each package its own name")
        if "on-demand" in names:
            entry.fail("a package is named 'on-demand', the name of the hourly price; rename it")
        if hourly is None and not packages:
            entry.fail("neither 'hourly' nor 'packages': nothing to price")
        for i, c in enumerate(cards):
            if c.card == name and (c.offer is None or offer is None or c.offer == offer):
                raise InputError(f"{where}: card {name!r} is listed twice without distinct offer names (cards[{i}] "
                                 f"{_offer_said(c.offer)} and cards[{position}] {_offer_said(offer)}); give each "
                                 "entry of a card its own 'offer' name (e.g. offer: secure, offer: community)")
        cards.append(CardPrices(name, None if hourly is None else _rounded(hourly), tuple(packages), hourly,
                                BILLING[own] if "billing" in entry else None, terms, offer))
    if not cards:
        doc.fail("field 'cards' is empty; list at least one card with its prices")
    return PriceFile(str(path) if path is not None else str(p), str(doc.raw("source", "")), str(doc.raw("date", "")),
                     bool(doc.raw("example", False)), currency, tuple(cards), BILLING[billing])


def _minimum_seconds(entry: JsonObject) -> Decimal | None:
    """The minimum billed written in minutes (minimum_minutes: 1), exact in seconds; None when not given. Refused
    with minimum_hours beside it (one minimum per entry)."""
    if "minimum_minutes" not in entry:
        return None
    if "minimum_hours" in entry:
        entry.fail("both 'minimum_hours' and 'minimum_minutes' are given; keep one (e.g. minimum_minutes: 1)")
    minutes = entry.number("minimum_minutes", minimum=0)
    if minutes > MAX_TERM_HOURS * 60:
        entry.fail(f"field 'minimum_minutes' is {minutes:g}; at most {MAX_TERM_HOURS * 60:,} minutes (a year)")
    return Decimal(repr(minutes)) * 60


def _offer_said(offer: str | None) -> str:
    return "with no offer" if offer is None else f"offer {offer!r}"


def _rounded(exact: Decimal) -> int:

    return round_cents(exact)


def card_name(card: str, where: str, field: str) -> str:
    """A card's catalog name, or the name as written for a custom card (a price file may price any card)."""
    return find_card_name(card)


def card_ref(value: Any, where: str, field: str) -> str:
    """A card as a plan names it, with an offer or not ('H100-SXM-80GB', 'h100@community'): the catalog's name,
    with the offer as written; else one line naming the file and the field. Whether the price file has that offer
    is checked where it is priced (PriceFile.offers)."""
    if not isinstance(value, str):
        return catalog_card(value, where, field)
    card, offer = split_offer(value)
    if offer == "":
        raise InputError(f"{where}: field {field!r} is {value!r}: name the offer after {OFFER_SEP!r} (CARD@OFFER, "
                         "e.g. H100-SXM-80GB@community) or drop it")
    return offer_label(catalog_card(card, where, field), offer)


def catalog_card(card: Any, where: str, field: str) -> str:
    """A card that must be in the catalog (hours scale by its FLOP/s): its name, else one line naming the file and
    the field with the nearest names."""
    from ..errors import UnknownNameError
    from ..hardware import find_card

    if not isinstance(card, str):
        raise InputError(f"{where}: field {field!r} must be a card name such as 'H100-SXM-80GB', got {card!r}")
    try:
        return find_card(card).name
    except UnknownNameError as e:
        raise InputError(f"{where}: field {field!r}: {e}") from None
