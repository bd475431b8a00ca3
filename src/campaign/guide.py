"""The map of the user's five questions to the commands that answer them (`campaign guide`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .results import Information


@dataclass(frozen=True)
class Step:
    command: str
    does: str


@dataclass(frozen=True)
class Question:
    number: int
    question: str
    outcome: str
    steps: tuple[Step, ...]


QUESTIONS: tuple[Question, ...] = (
    Question(1, "My model has never run. Where do I start?", "a memory envelope and an input for the first test run", (
        Step("models", "what the model is: layers, heads, KV heads, MoE/MLA, exact parameter count"),
        Step("memory", "GPU memory per card: weights, gradients, optimizer, activations, logits, KV, overheads, "
                       "reserve; fit per card"),
        Step("kv", "the KV cache by context, KV heads, sequences, precision, static vs dynamic; what fits a card"),
        Step("cards", "GPUs with memory as CUDA reports it to torch, bandwidth, bf16 FLOP/s"),
        Step("trace", "the peak traced phase by phase without a GPU (fake tensors)"),
        Step("measure", "the peak measured phase by phase on the card: allocated vs reserved"),
        Step("explain", "estimate vs measured, the gap attributed, a safety margin"),
    )),
    Question(2, "The score goes up, but can I trust it?",
             "a separate evaluation set, errors reviewed, a quantified difference", (
        Step("split", "group-, duplicate- and label-aware splits with a manifest"),
        Step("leaks", "exact and near duplicates, shared groups and label conflicts across splits"),
        Step("usage", "a ledger of how each split was used; warns when the test set chose settings"),
        Step("errors", "confusion matrix, per-class metrics, extraction validity, review sheet, taxonomy"),
        Step("regress", "baseline vs candidate: flips, McNemar, guards on what must not get worse"),
        Step("seeds", "paired seeds: intervals, tests, a useful-effect threshold, seeds needed"),
    )),
    Question(3, "I am about to train. What must I check first?", "a full update, a clear batch, usable traces", (
        Step("check", "one complete step changes exactly the intended parameters; reload and resume"),
        Step("inspect", "the whole set through your collate: answers cut, loss positions, EOS/pad, padding side"),
        Step("batch", "effective batch, gradient accumulation and loss normalization"),
        Step("run", "a run manifest: data, code, parameters, environment, predictions, decision"),
        Step("runs", "runs listed and compared, failed and stopped ones included"),
    )),
    Question(4, "Fine-tune or compress: which variant?", "a reference, a controlled change, equal quality", (
        Step("check", "adapters bound to their exact base model, reload checked"),
        Step("quant", "quantization formats compared on the same data: memory and quality"),
        Step("ablate", "an ablation plan: controls, factors, interactions, budget"),
    )),
    Question(5, "My budget is limited. What do I run first?", "an order of experiments, cost against useful results", (
        Step("budget", "a campaign split into phases, costed in USD against 3/7/30-day packages"),
        Step("bench", "cost compared at equal quality"),
        Step("report", "the whole campaign in one HTML file: each figure, how and when obtained, what is missing"),
        Step("export", "the hand-over: the accepted model or adapter, manifests, report, limits observed"),
        Step("verify", "the receiver's check of a bundle: every sha256, the adapter's binding, what is missing"),
    )),
)


SCHEMA = "campaign.guide/1"


@dataclass(frozen=True)
class GuideMap(Information):
    """The five questions with their commands, each marked built or planned (`built`: the commands the CLI has)."""

    questions: tuple[Question, ...]
    built: frozenset[str]
    schema: str = SCHEMA

    def fields_dict(self) -> dict[str, Any]:
        # by hand: each step says whether it is built, and `built` itself is not written
        return {"questions": [
            {"number": q.number, "question": q.question, "outcome": q.outcome,
             "steps": [{"command": f"campaign {s.command}", "does": s.does, "built": s.command in self.built}
                       for s in q.steps]} for q in self.questions]}


def guide_map(built: set[str] | frozenset[str]) -> GuideMap:
    """The map for a CLI that has the commands `built` (the others show as planned)."""
    return GuideMap(QUESTIONS, frozenset(built))
