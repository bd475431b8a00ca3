"""`campaign memory ... --card X --frontier`: the largest batch at each context length on the card, and what each
change modelled saves; each row and each what-if is what the command it names prints."""
from __future__ import annotations

import json
from dataclasses import replace

from campaign.hardware.cards import find_card
from campaign.memory import estimate_memory, make_workload
from campaign.memory.fit import card_estimate, frontier
from campaign.models import load_spec


def test_each_row_is_the_largest_batch_that_fits_at_its_length():
    spec, card = load_spec("gpt2"), find_card("rtx-4090")
    w = make_workload(seq_len=1024)
    f = frontier(spec, w, card.memory_bytes, card.name)
    assert [n for n, _, _ in f.rows] == [256, 512, 1024]      # up to gpt2's 1,024 positions
    for n, most, need in f.rows:
        at = replace(w, seq_len=n, batch=most)
        assert card_estimate(spec, at, card.memory_bytes).verdict(card.memory_bytes) == "fits"
        assert card_estimate(spec, replace(at, batch=most + 1), card.memory_bytes).verdict(card.memory_bytes) != "fits"
        assert need == card_estimate(spec, at, card.memory_bytes).required_bytes <= card.memory_bytes
    assert [m for _, m, _ in f.rows] == sorted((m for _, m, _ in f.rows), reverse=True)


def test_the_what_ifs_are_the_estimates_of_the_commands_they_name(cli):
    # gpt2 full fine-tuning in bf16: AdamW keeps 2 bf16 states per parameter (2 x 2 B x 124,439,808 = 497,759,232 B),
    # bitsandbytes' 8-bit AdamW 2 x 1 B plus an fp32 absmax per 256 (2 x 124,439,808 x (1 + 4/256) = 252,768,360 B)
    spec = load_spec("gpt2")
    states = {o: next(i.bytes for i in estimate_memory(spec, make_workload(seq_len=1024, optimizer=o)).items
                      if i.name == "optimizer states") for o in ("adamw", "adamw-8bit")}
    assert states == {"adamw": 497_759_232, "adamw-8bit": 252_768_360}
    res = cli("memory", "gpt2", "--seq-len", "1024", "--card", "rtx-4090", "--frontier", "--json")
    assert res.code in (0, 1), res.err
    f = json.loads(res.out)["frontier"]
    what = {row[1]: row for row in f["what_if"]}
    assert set(what) == {"--optimizer adamw-8bit", "--grad-checkpointing"}
    base = json.loads(cli("memory", "gpt2", "--seq-len", "1024", "--card", "rtx-4090", "--json").out)
    for flag, (_, _, need, saved) in what.items():
        after = json.loads(cli("memory", "gpt2", "--seq-len", "1024", "--card", "rtx-4090", *flag.split(),
                               "--json").out)
        assert need == after["required_bytes"] and saved == base["required_bytes"] - need > 0
    text = cli("memory", "gpt2", "--seq-len", "1024", "--card", "rtx-4090", "--frontier")
    n, most, _ = f["rows"][-1]
    assert f"--seq-len {n} --batch {most}" in text.out and "what if 8-bit AdamW" in text.out


def test_a_frontier_needs_a_card(cli):
    res = cli("memory", "gpt2", "--frontier")
    assert res.code == 2 and res.err.count("\n") == 1 and "--frontier needs --card" in res.err
