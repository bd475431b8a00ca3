"""Money as the plans count it: exact cents (int or Decimal) rounded once, half up, and shown as dollars."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def round_cents(amount: Decimal | int) -> int:
    """Exact cents rounded once, half up, to a whole cent."""
    return int(Decimal(amount).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def usd(amount_cents: int | Decimal) -> str:
    """Cents as '$1,234.56' (exact: integer arithmetic, no float; exact cents rounded half up)."""
    if not isinstance(amount_cents, int):
        amount_cents = int(Decimal(amount_cents).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    sign = "-" if amount_cents < 0 else ""
    whole, part = divmod(abs(amount_cents), 100)
    return f"{sign}${whole:,}.{part:02d}"


__all__ = ["round_cents", "usd"]
