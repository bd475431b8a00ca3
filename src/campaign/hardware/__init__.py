"""GPU cards: memory as the driver reports it, bandwidth, bf16 FLOP/s, vendor and software stack."""
from .cards import Card, all_cards, find_card

__all__ = ["Card", "all_cards", "find_card"]
