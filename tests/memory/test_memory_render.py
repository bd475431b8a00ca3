"""`campaign memory`'s text breakdown: each item's source on request, and the subtotals under their own items."""
from __future__ import annotations


def _rows(out: str) -> list[str]:
    """The breakdown table's first cells, in order (a wrapped row's continuation lines have an empty first cell)."""
    cells = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    return [c for c in cells if c]


def test_sources_are_shown_on_request(cli):
    args = ("memory", "llama-3.1-8b", "--shard", "zero2", "--gpus", "8", "--mixed-precision", "--seq-len", "512",
            "--no-solve")
    plain, sourced = cli(*args), cli(*args, "--sources")
    assert plain.code in (0, 1) and sourced.code in (0, 1), plain.err + sourced.err
    # the weights' source (the config inventory) and the ZeRO-2 reduce bucket's (DeepSpeed's stage_1_and_2.py)
    assert "config inventory" in sourced.out and "stage_1_and_2.py" in sourced.out
    assert "config inventory" not in plain.out and "stage_1_and_2.py" not in plain.out


def test_each_subtotal_follows_its_own_items_on_several_cards(cli):
    # on 8 cards NCCL's buffers lie outside the allocator beside the context: the allocator overhead is the only
    # item of the reserved level, and the context and NCCL that of the device level
    r = cli("memory", "llama-3.1-8b", "--shard", "zero2", "--gpus", "8", "--mixed-precision", "--seq-len", "512",
            "--no-solve")
    rows = _rows(r.out)
    allocated = rows.index("= peak allocated")
    assert rows[allocated + 1:allocated + 6] == [
        "allocator overhead (reserved - allocated)", "= peak reserved", "CUDA context and libraries",
        "NCCL communication buffers", "= device (nvidia-smi)"]
