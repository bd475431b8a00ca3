"""plan_memory: one device figure per card, whichever way the card is asked for (issue 27, item 8)."""
from __future__ import annotations

from campaign.hardware.cards import find_card
from campaign.memory import make_workload
from campaign.memory.plan import plan_memory
from campaign.models import load_spec


def test_a_card_gets_the_same_verdict_and_headroom_in_every_view():
    # Llama-3.1-8B, batch 3 x 2048 tokens with checkpointing: 81.6 GiB on the device with room to spare, but
    # against an A100's 80 GiB the allocator releases its cached segments and the step fits the device, not the
    # reserve ("tight"). The summary and --all-cards used the figure with room to spare ("does not fit")
    spec, w = load_spec("llama-3.1-8b"), make_workload(batch=3, seq_len=2048, grad_checkpointing=True)
    card = find_card("a100-80gb")
    asked = plan_memory(spec, w, card="a100-80gb", solve=False)
    one = asked.fits[0]
    assert one.card == card.name and one.verdict == "tight"
    # tight by its definition: the device figure fits the card, the reserve does not
    est = asked.estimate
    assert est.device_bytes <= card.memory_bytes < est.required_bytes
    assert one.headroom_bytes == card.memory_bytes - est.required_bytes
    for view in (plan_memory(spec, w, solve=False), plan_memory(spec, w, all_cards=True, solve=False)):
        assert view.estimate.device_bytes > card.memory_bytes  # printed without a card: the replay with room to spare
        same = next(f for f in view.fits if f.card == card.name)
        assert (same.verdict, same.headroom_bytes) == (one.verdict, one.headroom_bytes)


def test_every_featured_card_is_fitted_as_its_own_card_would_be():
    # Qwen2.5-7B full fine-tuning at batch 2 x 512: fits the large cards, not the small ones
    spec, w = load_spec("qwen2.5-7b"), make_workload(batch=2)
    summary = plan_memory(spec, w, solve=False)
    verdicts = set()
    for fit in summary.fits:
        alone = plan_memory(spec, w, card=fit.card, solve=False).fits[0]
        assert (fit.verdict, fit.headroom_bytes) == (alone.verdict, alone.headroom_bytes), fit.card
        verdicts.add(fit.verdict)
    assert verdicts == {"fits", "tight", "does not fit"}
