"""campaign inspect: the user's collate run over a dataset written here, with a tokenizer trained here; each check
once on a clean setup and once with its bug planted. Every count below is worked out by hand from ROWS."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from campaign.errors import InputError  # noqa: E402
from campaign.train.inspect import inspect  # noqa: E402

# (question words, answer words, class). An example is "<s> q0 .. q{q-1} => a0 .. a{a-1} </s>": one token per word
# (word-level tokenizer), so it has q + a + 3 tokens, and its prompt "<s> q.. =>" has q + 2:
#   #0 8, #1 10, #2 12, #3 15, #4 6, #5 16, #6 19, #7 15, #8 5, #9 12 tokens; prompts #5 12, #6 16 tokens.
ROWS = [(3, 2, "yes"), (4, 3, "no"), (5, 4, "yes"), (6, 6, "no"), (2, 1, "yes"),
        (10, 3, "no"), (14, 2, "yes"), (3, 9, "no"), (1, 1, "yes"), (7, 2, "no")]


def _rows() -> list[dict]:
    return [{"id": i, "question": " ".join(f"q{j}" for j in range(q)), "answer": " ".join(f"a{j}" for j in range(a)),
             "label": label} for i, (q, a, label) in enumerate(ROWS)]


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    return path


def train_tokenizer(texts, *, pad="<pad>", kind="wordlevel"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    if kind == "wordlevel":
        backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        backend.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=specials))
    else:                                                 # byte-level BPE, as GPT-2 and Llama 3 tokenizers are
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token=pad)


def sft(data: Path, *, max_length=32, pad="<pad>", mask="attention", side="right", shift=False, all_masked=False,
        bos_in_text=False, target=True, kind="wordlevel", extra=None, prompt_masked=True, truncation_side="right"):
    """The usual SFT collate: prompt + answer + EOS, truncated and padded; labels = input_ids with the prompt and
    the padding at -100. Each keyword plants one bug."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    tok = train_tokenizer([f"{r['question']} => {r['answer']}" for r in rows], pad=pad, kind=kind)
    if pad is None:
        tok.pad_token = tok.eos_token                      # the usual line for a model without a pad token
    tok.padding_side = side
    tok.truncation_side = truncation_side

    def collate(examples):
        prompts = [("<s> " if bos_in_text else "") + f"{e['question']} =>" for e in examples]
        texts = [f"{p} {e['answer']} </s>" for p, e in zip(prompts, examples, strict=True)]
        batch = tok(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        ids, attn = batch["input_ids"], batch["attention_mask"]
        labels = ids.clone()
        if mask == "pad_id":
            labels[ids == tok.pad_token_id] = -100
        elif mask == "attention":
            labels[attn == 0] = -100
        for row, prompt in enumerate(prompts if prompt_masked else []):
            start = int((attn[row] == 0).sum()) if side == "left" else 0
            labels[row, start:start + len(tok(prompt)["input_ids"])] = -100
        if all_masked:
            labels[:] = -100
        if shift:                                          # the collate shifts; the model will shift again
            labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
        batch["labels"] = labels
        return batch

    setup = {"dataset": rows, "tokenizer": tok, "collate": collate, "label_field": "label",
             "target_field": "answer" if target else None, **(extra or {})}
    return lambda: setup


def by_id(report) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


# ------------------------------------------------------------------------------------------ truncation

def test_a_clean_setup_passes_every_check_with_the_counts_of_the_whole_set(data):
    r = inspect(sft(data))
    assert r.passed and r.kind == "text" and r.label_kind == "token" and r.examples == 10
    assert set(by_id(r).values()) == {"pass"}, by_id(r)
    assert (r.truncated, r.tokens_cut, r.answer_lost, r.no_loss) == (0, 0, 0, 0)
    assert (r.longest.index, r.longest.length, r.shortest.index, r.shortest.length) == (6, 19, 8, 5)
    yes, no = {c.label: c for c in r.classes}["yes"], {c.label: c for c in r.classes}["no"]
    assert (yes.examples, yes.min_length, yes.median_length, yes.max_length) == (5, 5, 8.0, 19)   # 8 6 12 19 5
    assert (no.examples, no.min_length, no.median_length, no.max_length) == (5, 10, 15.0, 16)     # 10 15 16 15 12
    # loss positions: the answer and its EOS, a + 1 each, none on the prompt
    assert [e.loss_positions for e in sorted(r.shown, key=lambda e: e.index)] == [3, 4, 5, 7]      # #0 #1 #2 #3
    sp = r.special
    assert (sp.bos_id, sp.eos_id, sp.pad_id, sp.pad_is_eos) == (1, 2, 3, False)
    assert (sp.start_with_bos, sp.double_bos, sp.eos_learned) == (10, 0, 10)


def test_answers_cut_by_truncation_are_counted_exactly(data):
    """max_length 12: #3 (15 tokens), #5 (16), #6 (19) and #7 (15) are cut, by 3 + 4 + 7 + 3 = 17 tokens; the
    prompts of #5 (12) and #6 (16) fill the 12 tokens, so these two keep no loss position at all."""
    r = inspect(sft(data, max_length=12))
    assert (r.truncated, r.tokens_cut, r.answer_lost, r.no_loss) == (4, 17, 4, 2)
    assert by_id(r)["inspect.answer_truncated"] == "fail" and by_id(r)["inspect.no_loss_positions"] == "fail"
    assert not r.passed
    per = {c.label: (c.truncated, c.answer_lost, c.no_loss) for c in r.classes}
    assert per == {"yes": (1, 1, 1), "no": (3, 3, 1)}      # yes: #6; no: #3 #5 #7 (no loss: #6 and #5)
    assert (r.longest.index, r.longest.length, r.longest.truncated_tokens) == (6, 12, 7)
    # #3 keeps 12 tokens: its prompt (8) and 4 of its 6 answer words; the EOS and two words are gone
    three = next(e for e in r.shown if e.index == 3)
    assert three.loss_positions == 4 and three.truncated_tokens == 3 and three.answer_kept is False
    assert three.marked == "<s> q0 q1 q2 q3 q4 q5 => «a0 a1 a2 a3»"


def test_an_answer_that_loses_only_its_eos_is_counted_too(data):
    """max_length 14: #3 and #7 (15 tokens) lose only their EOS; #5 (16) loses a2 and the EOS, #6 (19) five tokens."""
    r = inspect(sft(data, max_length=14))
    assert (r.truncated, r.tokens_cut, r.answer_lost, r.no_loss) == (4, 1 + 2 + 5 + 1, 4, 1)   # no loss: #6 (16)


def test_without_the_answer_field_the_tokenizer_cut_counts_the_answers(data):
    r = inspect(sft(data, max_length=12, target=False))
    assert (r.truncated, r.tokens_cut, r.answer_lost) == (4, 17, 4)
    assert by_id(r)["inspect.answer_truncated"] == "fail"
    assert any("target_field" in n for n in r.notes)


def test_a_byte_level_bpe_tokenizer_counts_the_same_as_its_own_backend(data):
    """A subword tokenizer: the expected cuts come from the backend tokenizer itself (tokenizers, not transformers,
    untruncated), independently of what inspect watches."""
    make = sft(data, max_length=10, kind="bpe")
    setup = make()
    backend = setup["tokenizer"].backend_tokenizer
    full = [len(backend.encode(f"{r['question']} => {r['answer']} </s>").ids) for r in setup["dataset"]]
    want = [max(0, n - 10) for n in full]
    assert sum(w > 0 for w in want) >= 3                    # the fixture does cut
    r = inspect(make)
    assert r.truncated == sum(w > 0 for w in want) and r.tokens_cut == sum(want)
    assert r.answer_lost == sum(w > 0 for w in want)


# ------------------------------------------------------------------------------------------ labels

def test_labels_all_masked_fail_no_loss_positions(data):
    r = inspect(sft(data, all_masked=True))
    assert r.no_loss == 10 and by_id(r)["inspect.no_loss_positions"] == "fail"
    assert "10 of 10 examples" in next(c.seen for c in r.checks if c.id == "inspect.no_loss_positions")


def test_pad_equal_to_eos_masked_by_pad_id_never_learns_eos(data):
    bad = inspect(sft(data, pad=None, mask="pad_id"))
    assert bad.special.pad_is_eos and bad.special.eos_learned == 0
    assert by_id(bad)["inspect.pad_is_eos_masked"] == "fail" and not bad.passed
    # pad = eos, but the padding masked by the attention mask: every answer keeps its EOS
    good = inspect(sft(data, pad=None, mask="attention"))
    assert good.special.pad_is_eos and good.special.eos_learned == 10
    assert by_id(good)["inspect.pad_is_eos_masked"] == "pass" and good.passed


def test_transformers_own_lm_collator_with_pad_equal_to_eos_is_caught(data):
    """DataCollatorForLanguageModeling(mlm=False) sets labels = input_ids and -100 where input_ids == pad id: with
    pad = eos every EOS goes, the classic 'the fine-tuned model never stops'."""
    from transformers import DataCollatorForLanguageModeling

    setup = sft(data, pad=None)()
    tok = setup["tokenizer"]
    rows = [dict(tok(f"{r['question']} => {r['answer']} </s>")) for r in setup["dataset"]]
    r = inspect({"dataset": rows, "tokenizer": tok, "collate": DataCollatorForLanguageModeling(tok, mlm=False)})
    assert by_id(r)["inspect.pad_is_eos_masked"] == "fail" and r.special.eos_learned == 0
    assert r.truncated is None and by_id(r)["inspect.answer_truncated"] == "skipped"
    assert r.no_loss == 0 and by_id(r)["inspect.labels_shifted_twice"] == "pass"


def test_loss_on_padding_fails(data):
    """Labels copied from input_ids with the padding left in. The examples shown (#1 #3, #0 #2: 10, 15, 8, 12
    tokens) are padded to 15, which pads #1 #0 #2; the pair longest/shortest (#6 19, #8 5) pads #8."""
    r = inspect(sft(data, mask="none"))
    assert by_id(r)["inspect.loss_on_padding"] == "fail"
    seen = next(c.seen for c in r.checks if c.id == "inspect.loss_on_padding")
    assert seen.startswith("4 of the 4 examples seen padded"), seen     # #0 #1 #2 and #8


def test_labels_shifted_by_the_collate_are_shifted_twice(data):
    bad = inspect(sft(data, shift=True))
    assert by_id(bad)["inspect.labels_shifted_twice"] == "fail"
    # the same labels with the user's own loss: it may shift or not, so a warning
    own = inspect(sft(data, shift=True, extra={"loss": lambda model, batch: None}))
    assert by_id(own)["inspect.labels_shifted_twice"] == "warn"
    assert by_id(inspect(sft(data)))["inspect.labels_shifted_twice"] == "pass"


def test_bos_written_in_the_text_and_added_by_the_tokenizer_is_doubled(data):
    r = inspect(sft(data, bos_in_text=True))
    assert r.special.double_bos == 10 and by_id(r)["inspect.double_bos"] == "fail"


# ------------------------------------------------------------------------------------------ padding side

def test_left_padding_in_training_fails_and_right_padding_passes(data):
    left = inspect(sft(data, side="left"))
    assert left.padding_side == "left" and left.tokenizer_padding_side == "left"
    assert by_id(left)["inspect.padding_side"] == "fail"
    row = next(e for e in left.shown if e.index == 0)           # 8 tokens in a batch padded to 15
    assert row.marked == "[pad x7] <s> q0 q1 q2 => «a0 a1 </s>»" and row.padding[:7] == (True,) * 7
    right = inspect(sft(data))
    assert right.padding_side == "right" and by_id(right)["inspect.padding_side"] == "pass"
    row = next(e for e in right.shown if e.index == 0)
    assert row.marked == "<s> q0 q1 q2 => «a0 a1 </s>» [pad x7]"
    assert row.loss == (False,) * 5 + (True,) * 3 + (False,) * 7


def test_left_padding_with_a_rotary_model_only_warns(data):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                                         num_key_value_heads=1, num_hidden_layers=1, vocab_size=64))
    r = inspect(sft(data, side="left", extra={"model": model}))
    assert by_id(r)["inspect.padding_side"] == "warn" and r.passed


# ------------------------------------------------------------------------------------------ shown, classes

def test_examples_per_class_are_collated_together(data):
    r = inspect(sft(data), examples=1)
    assert [(e.index, e.label) for e in r.shown] == [(1, "no"), (0, "yes")]   # classes of 5 each, by name
    assert len(r.shown[0].tokens) == 10                      # #1 (10) and #0 (8) in one batch padded to 10
    assert r.shown[0].target == "a0 a1 a2 </s>"


def test_one_class_per_example_counts_cut_inputs_as_a_warning(data):
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    tok = train_tokenizer([f"{r['question']} => {r['answer']}" for r in rows])

    def collate(examples):
        batch = tok([e["question"] for e in examples], max_length=8, truncation=True, padding=True,
                    return_tensors="pt")
        batch["labels"] = torch.tensor([int(e["label"] == "yes") for e in examples])
        return batch

    r = inspect(lambda: {"dataset": rows, "tokenizer": tok, "collate": collate, "label_field": "label"})
    # BOS + q words: cut past 8 are #5 (11: 3), #6 (15: 7), #9 (8: none)
    assert r.label_kind == "sequence" and (r.truncated, r.tokens_cut) == (2, 10) and r.answer_lost is None
    assert by_id(r)["inspect.answer_truncated"] == "warn" and r.passed


# ------------------------------------------------------------------------------------------ images

def images(bad_shape=False, unscaled=False, dog_norm=None):
    g = torch.Generator().manual_seed(0)
    rows = [{"image": torch.randint(0, 256, (3, 10, 10), generator=g, dtype=torch.uint8),
             "label": "cat dog".split()[i % 2]} for i in range(6)]

    def collate(examples):
        out = []
        for e in examples:
            x = e["image"].float()
            side = 6 if bad_shape and e["label"] == "dog" else 8     # the planted bug: dogs get another crop
            x = x[:, :side, :side]
            x = x if unscaled else x / 255
            if dog_norm == "normalize" and e["label"] == "dog":         # planted: only dogs get Normalize
                x = (x - 0.5) / 0.25
            elif dog_norm == "twice" and e["label"] == "dog":           # planted: dogs divided by 255 twice
                x = x / 255
            out.append(x)
        return {"pixel_values": torch.stack(out), "labels": torch.tensor([int(e["label"] == "dog") for e in examples])}

    transform = {"cat": "crop 8x8", "dog": "crop 6x6"} if bad_shape else "crop 8x8, /255"
    return lambda: {"dataset": rows, "collate": collate, "transform": transform}


def test_images_report_shapes_and_scale_per_class():
    r = inspect(images())
    assert r.kind == "image" and r.passed and r.special is None and r.transform == "crop 8x8, /255"
    assert {c.label: c.shapes for c in r.classes} == {"cat": ("3x8x8",), "dog": ("3x8x8",)}
    assert all(0 <= c.pixel_min and c.pixel_max <= 1 for c in r.classes)


def test_a_class_with_its_own_shape_and_unscaled_pixels_fail():
    r = inspect(images(bad_shape=True))
    assert by_id(r)["inspect.image_shapes"] == "fail"
    assert {c.label: c.shapes for c in r.classes} == {"cat": ("3x8x8",), "dog": ("3x6x6",)}
    assert {c.label: c.transform for c in r.classes} == {"cat": "crop 8x8", "dog": "crop 6x6"} and r.transform is None
    r = inspect(images(unscaled=True))
    assert by_id(r)["inspect.image_scale"] == "fail" and max(c.pixel_max for c in r.classes) > 10


# ------------------------------------------------------------------------------------------ bad input, CLI

@pytest.mark.parametrize("drop, fragment", [("tokenizer", "no tokenizer"), ("dataset", "no dataset"),
                                            ("collate", "no collate")])
def test_a_setup_missing_what_inspect_reads_is_refused(data, drop, fragment):
    setup = dict(sft(data)())
    setup.pop(drop)
    with pytest.raises(InputError, match=fragment):
        inspect(lambda: setup)


def _setup_file(tmp_path: Path, data: Path, body: str) -> str:
    path = tmp_path / "my_setup.py"
    path.write_text(f"import json, sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                    f"from test_inspect import sft\nfrom pathlib import Path\nDATA = Path({str(data)!r})\n" + body,
                    encoding="utf-8")
    return f"{path}:make_setup"


def test_cli_exit_codes_json_and_one_line_errors(cli, tmp_path, data):
    good = _setup_file(tmp_path, data, "def make_setup():\n    return sft(DATA)()\n")
    r = cli("inspect", good, "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["schema"] == "campaign.inspect/1" and out["examples"] == 10 and out["truncated"] == 0
    assert {c["id"] for c in out["checks"]} >= {"inspect.answer_truncated", "inspect.no_loss_positions",
                                                "inspect.pad_is_eos_masked", "inspect.labels_shifted_twice"}
    bad = _setup_file(tmp_path, data, "def make_setup():\n    return sft(DATA, max_length=12)()\n")
    r = cli("inspect", bad)
    assert r.code == 1 and "PROBLEMS" in r.out and "inspect.answer_truncated: fail" in r.out
    assert "4 of 10 examples lost their answer" in r.out
    for body, fragment in [("def make_setup():\n    s = sft(DATA)()\n    s.pop('tokenizer')\n    return s\n",
                            "no tokenizer"),
                           ("def make_setup():\n    s = sft(DATA)()\n    s.pop('dataset')\n    return s\n",
                            "no dataset"),
                           ("def make_setup():\n    s = sft(DATA)()\n    s['label_field'] = 'class'\n    return s\n",
                            "label_field 'class' is not a field"),
                           ("def make_setup():\n    s = sft(DATA)()\n    s['collate'] = lambda ex: 1 / 0\n"
                            "    return s\n", "collate raised ZeroDivisionError on example 0")]:
        r = cli("inspect", _setup_file(tmp_path, data, body))
        assert r.code == 2 and r.err.count("\n") == 1 and fragment in r.err and "Traceback" not in r.err, r.err
    r = cli("inspect", good, "--examples", "0")
    assert r.code == 2


def test_pre_tokenized_data_says_truncation_was_not_observed(data):
    """The collate only pads token ids made earlier (dataset.map): nothing it does can cut, and what was cut
    before is not seen, so the count is unknown, not 0; the answers are still compared (target_field)."""
    setup = sft(data, max_length=12)()
    tok, collate = setup["tokenizer"], setup["collate"]
    rows = [{**r, **{k: v[0].tolist() for k, v in collate([r]).items()}} for r in setup["dataset"]]

    def pad_only(examples):
        width = max(len(e["input_ids"]) for e in examples)
        def fill(key, value):
            return torch.tensor([e[key] + [value] * (width - len(e[key])) for e in examples])
        return {"input_ids": fill("input_ids", tok.pad_token_id), "attention_mask": fill("attention_mask", 0),
                "labels": fill("labels", -100)}

    r = inspect(lambda: {**setup, "dataset": rows, "collate": pad_only})
    assert r.truncated is None and r.tokens_cut is None and r.answer_lost == 4 and r.no_loss == 2
    assert any("truncation not observed" in n for n in r.notes)


def test_the_tokenizer_is_left_as_it_was_given(data):
    setup = sft(data, max_length=12)()
    tok = setup["tokenizer"]
    inspect(lambda: setup)
    assert "_encode_plus" not in vars(tok)                  # the watch is gone: the class's method again
    own = tok._encode_plus
    tok._encode_plus = own                                  # a user's own instance attribute survives it
    inspect(lambda: setup)
    assert vars(tok)["_encode_plus"] is own


def test_a_data_only_setup_is_refused_where_a_model_is_needed(data):
    from campaign.train.setup import load_setup

    with pytest.raises(InputError, match="must return the model and the batches"):
        load_setup(sft(data))
    assert load_setup(sft(data), needs=()).model is None


def test_a_notebook_passes_its_live_objects(data):
    import campaign

    r = campaign.inspect(sft(data, max_length=12)(), examples=1)
    assert r.source == "" and r.truncated == 4 and len(r.shown) == 2


def test_progress_is_reported_over_the_set(data):
    lines: list[str] = []
    inspect(sft(data), progress=lines.append)
    assert lines[0] == "collating example 1 of 10" and lines[-1] == "collating the examples shown"


# ------------------------------------------------------------------------------------------ issue 26 item 5

def test_the_loss_on_the_prompt_fails_when_the_answer_field_is_given(data):
    r = inspect(sft(data, prompt_masked=False))            # planted: only the padding masked
    c = next(c for c in r.checks if c.id == "inspect.loss_on_prompt")
    assert c.status == "fail" and "more than their answer ('answer')" in c.seen and r.status == "fail"
    assert "-100" in c.fix
    ok = inspect(sft(data))
    assert by_id(ok)["inspect.loss_on_prompt"] == "pass" and ok.passed
    assert by_id(inspect(sft(data, target=False)))["inspect.loss_on_prompt"] == "skipped"


def test_left_truncation_that_cuts_most_questions_fails(data):
    r = inspect(sft(data, max_length=9, truncation_side="left"))    # 7 of 10 examples longer than 9 tokens
    c = next(c for c in r.checks if c.id == "inspect.prompt_truncated")
    assert c.status == "fail" and "cut the start of the prompt (the question) of 7 of 10 examples" in c.seen
    assert r.status == "fail"
    few = inspect(sft(data, max_length=17, truncation_side="left"))  # only #6 (19 tokens) is cut
    assert by_id(few)["inspect.prompt_truncated"] == "warn"
    room = inspect(sft(data, truncation_side="left"))
    assert by_id(room)["inspect.prompt_truncated"] == "pass" and room.passed


@pytest.mark.parametrize("planted", ["normalize", "twice"])
def test_one_class_normalized_differently_fails(planted):
    r = inspect(images(dog_norm=planted))
    c = next(c for c in r.checks if c.id == "inspect.image_normalization")
    assert c.status == "fail" and "not normalized alike" in c.seen and r.status == "fail"
    ok = inspect(images())
    assert by_id(ok)["inspect.image_normalization"] == "pass" and ok.passed


# ------------------------------------------------------------------------------------------ padding attended
# inspect.padding_masked (issue 26's held-out family "masks and padding"): the positions a batch adds to an example
# (its length collated alone against its row in a shown batch) must be at attention mask 0. A collate that builds the
# mask as all ones went through CLEAN on 1201f22.

def checks_of(report):
    return {c.id: c for c in report.checks}


def changed(setup, change):
    base = setup()
    collate = base["collate"]

    def planted(examples):
        batch = collate(examples)
        change(batch)
        return batch

    return lambda: {**base, "collate": planted}


def test_the_clean_collate_masks_the_padding_of_every_padded_example(data):
    r = inspect(sft(data))
    c = checks_of(r)["inspect.padding_masked"]
    # two batches are shown: 2 examples per class, #0, #1, #2, #3 (8, 10, 6, 15 tokens: #0, #1 and #2 padded), and
    # the longest with the shortest, #6 and #8 (19 and 5 tokens: #8 padded)
    assert c.status == "pass" and "of the 4 examples padded" in c.seen and r.passed


def test_a_mask_of_all_ones_over_the_padding_fails(data):
    def ones(batch):
        batch["attention_mask"] = torch.ones_like(batch["attention_mask"])

    r = inspect(changed(sft(data), ones))
    c = checks_of(r)["inspect.padding_masked"]
    assert c.status == "fail" and "4 of the 4 examples" in c.seen and r.status == "fail"


def test_a_batch_without_attention_mask_warns(data):
    r = inspect(changed(sft(data), lambda batch: batch.pop("attention_mask")))
    assert checks_of(r)["inspect.padding_masked"].status == "warn"
