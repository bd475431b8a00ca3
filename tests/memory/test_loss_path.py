"""transformers' causal-LM loss by version (--hf-loss): the fp32 copies of the logits each one makes, by hand.

current (4.49 on): logits (bf16, held by the output) + the fp32 upcast inside the loss + log_softmax's fp32 output;
shift-copy (4.46-4.48): ForCausalLMLoss also makes shift_logits.contiguous() in fp32 (removed by transformers#35646);
float-logits (4.45 and before): the model returns logits.float() and the loss copies them shifted."""
from __future__ import annotations

import pytest

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.models import load_spec

V, TOKENS = 50_257, 2 * 128  # GPT-2's vocabulary; batch 2 x 128 tokens


def _items(hf_loss, phase):
    est = estimate_memory(load_spec("gpt2"), make_workload(batch=2, seq_len=128, hf_loss=hf_loss))
    return {i.name: i.bytes for i in next(p for p in est.phases if p.name == phase).items}


@pytest.mark.parametrize("hf_loss, at_loss, held", [
    ("current", 2 + 4 + 4, 2 + 4),        # bf16 logits, fp32 upcast, log_softmax output; then logits + log_softmax
    ("shift-copy", 2 + 4 + 4 + 4, 2 + 4),  # + the shifted fp32 copy, freed with the loss
    ("float-logits", 4 + 4 + 4, 4 + 4),    # the output is the fp32 upcast (bf16 dropped), kept through backward
])
def test_each_loss_path_by_hand(hf_loss, at_loss, held):
    assert _items(hf_loss, "forward")["logits and loss"] == TOKENS * V * at_loss
    assert _items(hf_loss, "backward")["logits (saved for backward)"] == TOKENS * V * held


def test_an_unknown_loss_path_is_refused():
    with pytest.raises(InputError, match="hf-loss 'old' is unknown"):
        make_workload(hf_loss="old")
