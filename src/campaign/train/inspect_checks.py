"""The checks of `campaign inspect`, each with a stable id, over the counts train/inspect.py gathered from the whole
set: what the loss sees (positions, answers, padding, EOS), how the labels are laid out, the padding side, BOS; for
images, shapes and scale per class."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checks import Check
from .inspect_stats import LAYOUT_SHARE, UNSCALED_PIXEL, ExampleStats, one_side

if TYPE_CHECKING:
    from .inspect_run import InspectRun

ROTARY_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim", "rotary_pct")
# Loss positions beyond the answer's own tokens and its EOS that still count as the answer: a chat template's role
# header, or the answer tokenized in context a few tokens longer than alone. More than this (or than half the
# answer) is the prompt in the loss.
PROMPT_SLACK = 4
# A class whose typical pixel spread is this many times another's was normalized differently (x / 255 twice, or
# no Normalize), not drawn from other images: photographs of different classes differ by a factor below 2.
SPREAD_RATIO = 4.0


def _of(k: int, n: int) -> str:
    return f"{k:,} of {n:,} example{'s' if n != 1 else ''}"


def _first(flags: list[bool], limit: int = 5) -> str:
    hits = [i for i, f in enumerate(flags) if f][:limit]
    return f" (e.g. #{', #'.join(map(str, hits))})" if hits else ""


def text_checks(ctx: InspectRun, stats: list[ExampleStats], lost: list[bool] | None,
                truncated: int | None) -> tuple[Check, ...]:
    n = len(stats)
    out: list[Check] = []
    token = ctx.label_kind == "token"

    # ---- every example must give the loss something
    if ctx.label_kind == "none":
        out.append(Check("inspect.no_loss_positions", "skipped" if ctx.s.loss is not None else "fail",
                         "the batch has no labels", "a model given no labels computes no loss (HF models return "
                         "loss=None)", "" if ctx.s.loss is not None else "build labels in the collate (input_ids "
                         "with -100 where no loss is wanted)", gates=False))
    else:
        empty = [st.loss_positions == 0 for st in stats]
        k = sum(empty)
        out.append(Check("inspect.no_loss_positions", "fail" if k else "pass",
                         f"{_of(k, n)} have no position where the loss is computed (labels all -100)" + _first(empty)
                         if k else f"every example has loss positions ({min(st.loss_positions for st in stats):,} "
                                   "at least)",
                         "an example with every label at -100 costs compute and teaches nothing; a whole batch of "
                         "them gives a NaN loss (0 / 0)" if k else "",
                         "mask only the prompt (and padding), not the answer; raise max_length if truncation took "
                         "the answer, or drop these examples" if k else ""))

    # ---- truncation over the whole set
    if lost is not None:
        k = sum(lost)
        how = "the loss positions miss part of the answer text, or truncation cut its end (EOS)" \
            if ctx.s.target_field else "the tokenizer cut their tail, where the answer sits"
        out.append(Check("inspect.answer_truncated", "fail" if k else "pass",
                         (f"{_of(k, n)} lost their answer, all or its tail: {how}" + _first(lost)) if k else
                         f"every answer is kept ({truncated or 0:,} example(s) cut by truncation)",
                         "the model is trained to stop mid-answer, or on nothing, for these examples" if k else "",
                         "raise max_length (see the longest example), shorten the prompt, or truncate the prompt "
                         "rather than the answer (truncation_side='left' keeps the end)" if k else ""))
    elif ctx.label_kind == "sequence" and truncated is not None:
        cut = [bool(st.truncated_tokens) for st in stats]
        k = sum(cut)
        out.append(Check("inspect.answer_truncated", "warn" if k else "pass",
                         (f"{_of(k, n)} had their input cut by truncation ("
                          f"{sum(st.truncated_tokens or 0 for st in stats):,} tokens)" + _first(cut)) if k else
                         "no input was cut by truncation",
                         "the class is predicted from what is left; a label that rests on the cut part cannot be "
                         "learned" if k else "", "raise max_length, or check by hand that the cut part does not "
                                                 "decide the label" if k else ""))
    else:
        out.append(Check("inspect.answer_truncated", "skipped",
                         "truncation not observed (the collate never called the tokenizer) and no target_field",
                         "", "give target_field (the field of the answer text) to compare with the answer",
                         gates=False))

    # ---- the loss on the answer, not on the prompt
    if token and ctx.s.target_field is not None:
        over = [st.answer_tokens is not None and st.answer_tokens > 0 and
                st.loss_real - st.answer_tokens - 1 > max(PROMPT_SLACK, st.answer_tokens // 2) for st in stats]
        k = sum(over)
        worst = max(((st.loss_real, st.answer_tokens or 0, st.length) for st, o in zip(stats, over, strict=True) if o),
                    default=None, key=lambda t: t[0] - t[1])
        out.append(Check("inspect.loss_on_prompt", "fail" if k else "pass",
                         f"{_of(k, n)} compute the loss on more than their answer ({ctx.s.target_field!r}) and its "
                         f"EOS: e.g. {worst[0]:,} loss positions of {worst[2]:,} tokens for an answer of {worst[1]:,}"
                         + _first(over) if k and worst else
                         f"the loss positions hold the answer ({ctx.s.target_field!r}) and its EOS, not the prompt",
                         "the model is trained to write the prompt as well as the answer (only the padding was "
                         "masked): it learns the questions' text, and the answer weighs less in the loss" if k else
                         "", "set the prompt's labels to -100 (labels[:len(prompt_ids)] = -100), or use a "
                             "completion-only collator" if k else ""))
    elif token:
        out.append(Check("inspect.loss_on_prompt", "skipped", "no target_field: the answer's extent is not known", "",
                         "give target_field (the field of the answer text)", gates=False))

    # ---- left truncation cuts the question
    left = getattr(ctx.tok, "truncation_side", "right") == "left"
    if token and truncated is not None and left:
        cut = [bool(st.truncated_tokens) for st in stats]
        k = sum(cut)
        tokens = sum(st.truncated_tokens or 0 for st, c in zip(stats, cut, strict=True) if c)
        out.append(Check("inspect.prompt_truncated", "fail" if 2 * k > n else "warn" if k else "pass",
                         f"truncation_side='left' cut the start of the prompt (the question) of {_of(k, n)} "
                         f"({tokens:,} tokens)" + _first(cut) if k else
                         "truncation_side='left' cut no prompt",
                         "the answer is trained without the question it answers: the model learns to answer what "
                         "it cannot see" if k else "",
                         "raise max_length, shorten the template or system prompt, or drop the examples that do not "
                         "fit (left truncation keeps the answer but loses the question)" if k else ""))

    # ---- padding must not be attended: the positions the batch added, masked out
    k, m = len(ctx.pad_attended), len(ctx.widened)
    first = f" (e.g. example #{min(ctx.pad_attended)})" if k else ""
    if m and not k and ctx.no_mask:
        out.append(Check("inspect.padding_masked", "warn", f"the collate returns no attention_mask, and {m:,} "
                         "examples were padded in the shown batches", "a model given no mask attends to the padding "
                         "(a bidirectional encoder, a pooling, left padding): its outputs then depend on the others' "
                         "lengths", "return the tokenizer's attention_mask with the batch"))
    else:
        out.append(Check("inspect.padding_masked", "fail" if k else "pass" if m else "skipped",
                         f"{k:,} of the {m:,} examples padded in the shown batches have their padding at attention "
                         f"mask 1{first}: the mask covers the padding" if k else
                         f"the attention mask leaves out the padding of the {m:,} examples padded in the shown batches"
                         if m else "no shown example was padded (one class, or equal lengths)",
                         "the model attends to the padding, so an example's output depends on how long the others "
                         "in its batch are (and a pooling or a loss on the padding is learned)" if k else "",
                         "build attention_mask from the padding (the tokenizer's pad() returns it), 0 on every "
                         "padded position" if k else "", gates=bool(m)))

    # ---- padding must not be learned
    if token:
        pads = [i in ctx.pad_loss for i in range(n)]
        k, m = sum(pads), len(ctx.padded)
        out.append(Check("inspect.loss_on_padding", "fail" if k else "pass" if m else "skipped",
                         (f"{k:,} of the {m:,} examples seen padded have a loss position on padding (attention "
                          "mask 0, label != -100)" + _first(pads)) if k else
                         f"no loss position falls on padding ({m:,} examples seen padded)" if m else
                         "no example was padded in the batches collated",
                         "the model learns to predict padding after every answer" if k else "",
                         "set labels to -100 where attention_mask is 0" if k else "", gates=False))

    # ---- EOS: learned, or masked with the padding
    special = ctx._special(stats)
    if not token or special is None or special.eos_id is None:
        out.append(Check("inspect.pad_is_eos_masked", "skipped",
                         "no EOS token" if special is None or special.eos_id is None else
                         "labels are one class per example", gates=False))
    elif special.pad_is_eos:
        k = special.eos_learned
        out.append(Check("inspect.pad_is_eos_masked", "pass" if k else "fail",
                         f"pad = eos ({special.eos!r}, id {special.eos_id}) and the EOS keeps its label in "
                         f"{_of(k, n)}" if k else
                         f"pad = eos ({special.eos!r}, id {special.eos_id}) and no example has a loss position on "
                         "EOS: masking the padding masked every EOS",
                         "" if k else "the model never learns to stop: generation runs to max_new_tokens",
                         "" if k else "use a distinct pad token (tokenizer.pad_token = an unused token) or mask the "
                                      "padding by attention_mask, not by pad_token_id, so the answer's EOS keeps "
                                      "its label"))
    else:
        out.append(Check("inspect.pad_is_eos_masked", "pass",
                         f"pad id {special.pad_id} differs from eos id {special.eos_id}" if special.pad_id is not None
                         else "no pad token (the collate pads by itself)"))
    if token and special is not None and special.eos_id is not None and not special.pad_is_eos:
        k = special.eos_learned
        out.append(Check("inspect.eos_learned", "pass" if k else "warn",
                         f"EOS ({special.eos!r}) has a loss position in {_of(k, n)}" if k else
                         f"no example has a loss position on EOS ({special.eos!r}); {special.eos_in_input:,} "
                         "contain it at all",
                         "" if k else "a model never shown EOS as a target does not learn to stop (fine for "
                                      "continued pre-training on packed text, not for answers)",
                         "" if k else "append tokenizer.eos_token to each answer before tokenizing"))

    # ---- BOS twice (a chat template that writes BOS, tokenized with add_special_tokens=True)
    if special is not None and special.bos_id is not None:
        k = special.double_bos
        out.append(Check("inspect.double_bos", "fail" if k else "pass",
                         f"{_of(k, n)} start with BOS twice ({special.bos!r})" if k else
                         f"{_of(special.start_with_bos, n)} start with BOS ({special.bos!r}), none twice",
                         "the model trains on a prefix it will not see at inference" if k else "",
                         "tokenize the chat template's text with add_special_tokens=False" if k else ""))

    # ---- labels shifted by the collate and again by the model
    if token:
        same, nxt = sum(st.same for st in stats), sum(st.next for st in stats)
        total = sum(st.loss_positions for st in stats)
        if not total or max(same, nxt) < LAYOUT_SHARE * total:
            out.append(Check("inspect.labels_shifted_twice", "skipped",
                             "the labels are not the input tokens at their positions nor the next ones (a "
                             "seq2seq or masked-LM target)", gates=False))
        elif same >= nxt:
            out.append(Check("inspect.labels_shifted_twice", "pass",
                             f"labels equal input_ids at {same:,} of {total:,} loss positions: not shifted (HF "
                             "causal LMs shift inside the model)"))
        else:
            status = "fail" if ctx.s.loss is None else "warn"
            out.append(Check("inspect.labels_shifted_twice", status,
                             f"labels equal the NEXT input token at {nxt:,} of {total:,} loss positions: the "
                             "collate already shifted them" + (", and the model shifts them again" if status ==
                                                               "fail" else ""),
                             "the model learns to predict the token after next" if status == "fail" else
                             "if your loss shifts too, the model learns the token after next",
                             "give labels = input_ids (with -100 where no loss): the model shifts them" if status ==
                             "fail" else "make sure your loss function does not shift again"))

    # ---- padding side
    side, declared = ctx.padding_sides, getattr(ctx.tok, "padding_side", None)
    seen = one_side(side)
    said = f" (tokenizer.padding_side = {declared!r})" if declared else ""
    if seen == "left" and token and not ctx.position_ids:
        rotary = _rotary(ctx.s.model)
        out.append(Check("inspect.padding_side", "warn" if rotary else "fail",
                         f"the batches are left-padded{said}, with labels and no position_ids",
                         "each short row's tokens sit at positions shifted by its padding"
                         + (": rotary positions are relative, so the loss is unchanged, but a cached or "
                            "absolute-position model would differ" if rotary else
                            ": models with absolute positions (GPT-2, OPT, BERT) learn offset positions; left "
                            "padding is a generation setting"),
                         "set tokenizer.padding_side = 'right' for training, or pass position_ids = "
                         "attention_mask.cumsum(-1) - 1"))
    elif seen == "mixed":
        out.append(Check("inspect.padding_side", "fail", f"rows padded on both sides or inside the text{said}",
                         "the attention mask and the positions disagree across rows",
                         "pad with one side: tokenizer.pad(..., padding_side='right')"))
    else:
        out.append(Check("inspect.padding_side", "pass",
                         f"{seen}-padded{said}" if seen != "none" else f"no padding in the batches{said}"))
    return tuple(out)


def _rotary(model: Any) -> bool:
    config = getattr(model, "config", None)
    if config is None:
        return False
    return any(getattr(config, k, None) is not None for k in ROTARY_KEYS) or \
        getattr(config, "position_embedding_type", None) == "rotary"


def image_checks(ctx: InspectRun, stats: list[ExampleStats]) -> tuple[Check, ...]:
    n = len(stats)
    out: list[Check] = []
    shapes: dict[str, set[tuple[int, ...]]] = {}
    for st in stats:
        shapes.setdefault(st.label, set()).add(st.shape)
    every = {s for v in shapes.values() for s in v}
    if len(every) == 1:
        out.append(Check("inspect.image_shapes", "pass",
                         f"every image is {'x'.join(map(str, next(iter(every))))} after the transforms"))
    else:
        per = "; ".join(f"{k}: {', '.join('x'.join(map(str, s)) for s in sorted(v))}"
                        for k, v in sorted(shapes.items()))
        out.append(Check("inspect.image_shapes", "fail", f"shapes differ after the transforms: {per}",
                         "a class with its own shape lets the model learn the class from the shape, and a batch "
                         "cannot stack them", "apply one resize/crop to every class (the same transform)"))
    big = [st.pixels is not None and st.pixels[1] > UNSCALED_PIXEL for st in stats]
    k = sum(big)
    out.append(Check("inspect.image_scale", "fail" if k else "pass",
                     (f"{_of(k, n)} have pixel values above {UNSCALED_PIXEL:g} (up to "
                      f"{max(st.pixels[1] for st in stats if st.pixels):g}): not scaled from 0-255" + _first(big))
                     if k else "pixel values are scaled (max "
                               f"{max(st.pixels[1] for st in stats if st.pixels):.3g})",
                     "the model was pre-trained on scaled, normalized inputs; raw 0-255 values saturate it"
                     if k else "",
                     "add ToTensor() / ConvertImageDtype(float) (x / 255) and Normalize(mean, std) to the transform "
                     "of every class" if k else ""))
    out.append(_normalization(stats))
    if ctx.label_kind != "none":
        empty = [st.loss_positions == 0 for st in stats]
        out.append(Check("inspect.no_loss_positions", "fail" if any(empty) else "pass",
                         f"{_of(sum(empty), n)} have label -100" + _first(empty) if any(empty) else
                         "every image has a label", "an image without a label teaches nothing" if any(empty) else "",
                         "give every image its class index" if any(empty) else ""))
    return tuple(out)


def _range(pixels: tuple[float, float, float, float]) -> str:
    """What an image's values say about its preprocessing: normalized (negative values), 0-1, or 0-255."""
    low, high = pixels[0], pixels[1]
    return "normalized (negative values)" if low < 0 else "0-1" if high <= 1.0 + 1e-6 else "above 1"


def _normalization(stats: list[ExampleStats]) -> Check:
    """Every class through the same normalization: the same value range (most images of each class) and pixel
    spreads (the median per-image std) within SPREAD_RATIO of each other."""
    from statistics import median

    by: dict[str, list[tuple[float, float, float, float]]] = {}
    for st in stats:
        if st.pixels is not None:
            by.setdefault(st.label, []).append(st.pixels)
    if len(by) < 2:
        return Check("inspect.image_normalization", "skipped", "one class: nothing to compare", gates=False)
    ranges = {k: max(set(r := [_range(p) for p in v]), key=r.count) for k, v in by.items()}
    spread = {k: median(p[3] for p in v) for k, v in by.items()}
    means = "; ".join(f"{k}: mean {median(p[2] for p in v):.3g}, std {spread[k]:.3g}, {ranges[k]}"
                      for k, v in sorted(by.items()))
    low, high = min(spread.values()), max(spread.values())
    if len(set(ranges.values())) > 1 or (high > 0 and (low == 0 or high / low > SPREAD_RATIO)):
        return Check("inspect.image_normalization", "fail", f"the classes are not normalized alike: {means}",
                     "the model can tell the class from the pixel statistics alone, and a class normalized "
                     "differently at inference is misread", "apply one normalization (ToTensor, then "
                     "Normalize(mean, std)) to every class: the same transform")
    return Check("inspect.image_normalization", "pass", f"every class normalized alike: {means}")
