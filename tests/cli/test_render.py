"""What the one-card line and trace say a person: '-' where nothing fits (as the table), what 'tight' means in
GiB, and a fit line from trace as from memory."""
from __future__ import annotations

import re

import pytest


def test_a_card_that_holds_nothing_shows_dashes_as_the_table_does(cli):
    r = cli("memory", "llama-3.1-70b", "--card", "rtx-4090")
    assert r.code == 1
    assert "max batch -, max seq -" in r.out and "max batch 0" not in r.out


def test_tight_says_how_much_of_the_reserve_is_left(cli):
    argv = ("memory", "llama-3.1-8b", "--method", "qlora", "--batch", "4", "--seq-len", "2048", "--grad-checkpointing",
            "--mixed-precision", "--no-kbit-upcast", "--card", "rtx-4090")
    est = cli(*argv, "--json").json()
    card = est["fits"][0]
    assert card["verdict"] == "tight"
    # what is left of the reserve, from the card and the device total (not from the headroom the code prints)
    left = (card["memory_bytes"] - est["device_bytes"]) / 2**30
    r = cli(*argv)
    assert r.code == 1
    m = re.search(r"tight: the device total fits, the reserve does not: ([\d.]+) of its ([\d.]+) GiB are left, so "
                  r"an estimate more than ([\d.]+)% low", " ".join(r.out.split()))
    assert m and float(m.group(1)) == pytest.approx(left, abs=0.006)
    assert float(m.group(2)) == pytest.approx(est["reserve_bytes"] / 2**30, abs=0.006)
    assert float(m.group(3)) == pytest.approx(100 * left * 2**30 / est["device_bytes"], abs=0.06)


def test_trace_without_a_card_gives_the_fit_line_memory_gives(cli):
    pytest.importorskip("torch")
    traced = cli("trace", "gpt2", "--seq-len", "128", "--json").json()
    memory = cli("memory", "gpt2", "--seq-len", "128", "--json").json()
    assert [f["card"] for f in traced["fits"]] == [f["card"] for f in memory["fits"]]
    assert all(f["verdict"] == "fits" for f in traced["fits"][:5])
    assert "fits: H200-SXM-141GB" in cli("trace", "gpt2", "--seq-len", "128").out


def test_trace_with_grads_kept_holds_the_gradients_through_the_forward(cli):
    # zero_grad(set_to_none=False): step 2's forward starts with step 1's gradients, bf16 here: gpt2's published
    # 124,439,808 parameters x 2 B. Without the flag zero_grad sets them to None: none in the forward.
    pytest.importorskip("torch")

    def forward_gradients(*flags):
        d = cli("trace", "gpt2", "--seq-len", "64", "--batch", "1", *flags, "--json").json()
        forward = next(p for p in d["phases"] if p["name"] == "forward")
        return sum(i["bytes"] for i in forward["items"] if i["category"] == "gradients")

    assert forward_gradients("--grads-kept") == 2 * 124_439_808
    assert forward_gradients() == 0


def test_trace_with_grad_accumulation_holds_the_summed_gradients_through_the_forward(cli):
    # gradient_accumulation_steps 2: the second micro-batch's forward starts with the first one's gradients, which
    # zero_grad frees only after optimizer.step(): gpt2's published 124,439,808 parameters x 2 B (bf16); LoRA (peft,
    # all-linear, r 16): per block c_attn 768->2304, attn c_proj 768->768, c_fc 768->3072, mlp c_proj 3072->768,
    # 16 x (3072 + 1536 + 3840 + 3840) = 196,608 adapter parameters, x 12 blocks, fp32 adapters: x 4 B. The estimate
    # counts the same gradients in its forward phase.
    pytest.importorskip("torch")

    def forward_gradients(command, *flags):
        d = cli(command, "gpt2", "--seq-len", "64", "--batch", "1", *flags, "--json").json()
        forward = next(p for p in d["phases"] if p["name"] == "forward")
        return sum(i["bytes"] for i in forward["items"] if i["category"] == "gradients")

    for command in ("trace", "memory"):
        assert forward_gradients(command, "--grad-accumulation", "2") == 2 * 124_439_808, command
        assert forward_gradients(command, "--grad-accumulation", "1") == 0, command
    pytest.importorskip("peft")
    assert forward_gradients("trace", "--method", "lora", "--grad-accumulation", "2") == 4 * 12 * 196_608
    assert forward_gradients("memory", "--method", "lora", "--grad-accumulation", "2") == 4 * 12 * 196_608


def test_fsdp_accumulation_holds_whole_gradients_as_the_trainer_runs_it(cli):
    # the HF Trainer runs micro-batches 1..K-1 under accelerator.no_sync: FSDP2 keeps each gradient whole (bf16) until
    # the last micro-batch reduce-scatters. The trace runs FSDP2 over a fake process group of 2 that way: its forward
    # grows by gpt2's 124,439,808 parameters x 2 B (not / 2 cards) with --grad-accumulation 2, and the estimate
    # counts the same in its forward and at the end of its backward.
    pytest.importorskip("torch")

    def phases(command, k):
        d = cli(command, "gpt2", "--seq-len", "64", "--batch", "1", "--gpus", "2", "--shard", "fsdp",
                "--grad-accumulation", str(k), "--json", *(("--no-solve",) if command == "memory" else ())).json()
        return {p["name"]: p for p in d["phases"]}

    whole = 2 * 124_439_808
    one, two = phases("trace", 1), phases("trace", 2)
    assert two["forward"]["bytes"] - one["forward"]["bytes"] == whole
    est = phases("memory", 2)
    for name in ("forward", "backward"):
        assert sum(i["bytes"] for i in est[name]["items"] if i["category"] == "gradients") == whole, name


def test_zero2_accumulation_ends_the_backward_with_two_partitions(cli):
    # DeepSpeed ZeRO-2 (stage_1_and_2.py): the partition summed over the earlier micro-batches, and the one each
    # micro-batch makes (copy_grads_in_partition) until the epilogue adds it in: 2 x 2 B x params / 8 cards. At 16
    # tokens the end of the backward (the gradients) is the backward's peak, so its items are the phase's.
    def backward_gradients(k):
        d = cli("memory", "llama-3.1-8b", "--gpus", "8", "--shard", "zero2", "--mixed-precision", "--seq-len", "16",
                "--grad-accumulation", str(k), "--json", "--no-solve").json()
        backward = next(p for p in d["phases"] if p["name"] == "backward")
        return sum(i["bytes"] for i in backward["items"] if i["category"] == "gradients")

    partition = 2 * 8_030_261_248 // 8
    bucket = 500_000_000 * 2   # the reduce bucket beside them: reduce_bucket_size's default 5e8 elements x 2 B
    assert backward_gradients(1) == partition + bucket
    assert backward_gradients(4) == 2 * partition + bucket
