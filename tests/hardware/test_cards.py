"""The card catalog's usable memory: what CUDA reports to torch, below nvidia-smi's board total, with its source."""
from __future__ import annotations

from campaign.hardware.cards import all_cards, find_card

MiB = 2**20


def test_usable_memory_is_torchs_total_not_the_board_total():
    for card in all_cards():
        assert card.smi_bytes and card.memory_source and card.smi_source, card.name
        if card.vendor == "amd":  # HIP reports rocm-smi's total
            assert card.memory_bytes == card.smi_bytes, card.name
        else:  # measured cards: 0.971 (T4, new drivers) to 0.996 (H200, B200); the two without a published torch
            # figure (L40, GH200) are derived below the board total too: never the board total, which overpromises
            assert 0.97 * card.smi_bytes <= card.memory_bytes < card.smi_bytes, card.name


def test_cards_without_their_own_torch_figure_are_derived_on_the_safe_side():
    l40, l40s = find_card("l40"), find_card("l40s")
    assert l40.smi_bytes == l40s.smi_bytes == 46_068 * MiB          # the same board total (ECC on)
    assert l40.memory_bytes == l40s.memory_bytes == 47_803_596_800   # so the L40S's deviceQuery figure
    assert l40.memory_source.startswith("derived")
    gh200 = find_card("gh200")   # 97,871 MiB less the H200's 143,771 - 143,156 = 615 MiB, the largest Hopper gap
    assert gh200.memory_bytes == (97_871 - 615) * MiB and gh200.memory_source.startswith("derived")


def test_the_t4_holds_what_torch_got_on_it():
    # FitCheck's sessions on a Tesla T4: torch total 14,912 MiB where nvidia-smi shows 15,360 MiB
    t4 = find_card("t4")
    assert t4.memory_bytes == 14_912 * MiB and t4.smi_bytes == 15_360 * MiB
    # the RTX 4090 on Linux: deviceQuery's 25,386,352,640 bytes (24,210 MiB) of nvidia-smi's 24,564 MiB
    assert find_card("rtx-4090").memory_bytes == 25_386_352_640
