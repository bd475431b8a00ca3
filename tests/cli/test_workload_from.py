"""The CLI's workload: an option a command does not take, or leaves unset, is the Workload dataclass's own default
(memory/workload.py), so that `campaign memory` and a notebook's make_workload() describe the same step."""
from __future__ import annotations

from campaign.cli.common import workload_from
from campaign.memory import make_workload


def test_no_option_given_is_the_libraries_default_workload():
    assert workload_from(None, train=None) == make_workload()
    assert workload_from(None, train=True, grads_kept=None, gpus=None) == make_workload()


def test_inference_reads_context_and_sequences_and_takes_no_optimizer():
    w = workload_from(None, train=False)
    assert (w.mode, w.seq_len, w.batch, w.optimizer) == ("infer", 4096, 1, "none")
    w = workload_from(None, train=False, context=1024, sequences=8, batch=2)
    assert (w.seq_len, w.batch) == (1024, 8)                       # --context/--sequences first for inference
    assert workload_from(None, train=True, seq_len=None, context=512).seq_len == 512   # the other pair: fallback


def test_options_given_pass_through_and_lora_targets_split_on_commas():
    w = workload_from(None, train=True, method="lora", lora_targets="q_proj,v_proj", grads_kept=True, gpus=2,
                      shard="zero2")
    assert w == make_workload(method="lora", gpus=2, shard="zero2", lora_targets=("q_proj", "v_proj"), grads_kept=True)
    assert w != make_workload(method="lora", gpus=2, shard="zero2")
