"""GPU cards: memory as CUDA reports it to torch, bandwidth, bf16 FLOP/s, vendor and software stack."""
from .cards import Card, CardList, all_cards, card_list, find_card

__all__ = ["Card", "CardList", "all_cards", "card_list", "find_card"]
