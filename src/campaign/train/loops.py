"""A setup factory may return the training loop itself: a `transformers.Trainer` (TRL's trainers are Trainers), or a
Lightning `LightningModule` (with its dataloader: its own `train_dataloader()`, or returned beside it as
`(module, dataloader)`). `check`, `batch` and `inspect` then use the loop's objects as they are:

  - Trainer: its model; its own checkpoint for the resume test (its save_model, _save_optimizer_and_scheduler and
    _save_rng_state, read back by the methods train(resume_from_checkpoint=...) calls); its optimizer and
    scheduler as the Trainer builds them (`create_optimizer_and_scheduler`
    over the run's number of updates, or the ones given to it); its loss (`compute_loss`, a subclass's own
    included); its accumulation step (`training_step` over an update's micro-batches with the `num_items_in_batch`
    the Trainer counts); the first micro-batches its own dataloader gives (its sampler, its data collator);
    its train dataset (already tokenized), data collator and tokenizer (`processing_class`) for `inspect`.
  - LightningModule: the module; the optimizer and scheduler of its `configure_optimizers()`; its loss
    (`training_step(batch, i)`); the first batches of its dataloader; the dataloader's dataset and collate_fn.
Nothing of the loop is re-created: a custom compute_loss, collator or optimizer is what is checked.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InputError

POSITION = "batch_"     # a tuple batch's fields, by position: batch_0, batch_1


def _named(obj: Any, module: str, name: str) -> bool:
    """obj is an instance of a class `name` from `module` (a subclass included), without importing it."""
    return any(c.__name__ == name and c.__module__.startswith(module) for c in type(obj).__mro__)


def is_trainer(obj: Any) -> bool:
    return _named(obj, "transformers.trainer", "Trainer")


def is_lightning(obj: Any) -> bool:
    module = obj[0] if isinstance(obj, tuple) and len(obj) == 2 else obj
    return _named(module, "lightning.pytorch", "LightningModule") or _named(module, "pytorch_lightning",
                                                                             "LightningModule")


def from_loop(made: Any, where: str) -> dict[str, Any]:
    """The setup's fields from a Trainer or a LightningModule (see the module docstring)."""
    return _from_trainer(made, where) if is_trainer(made) else _from_lightning(made, where)


def _first_batches(loader: Any, n: int, where: str) -> list[Mapping[str, Any]]:
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) >= n:
            break
    if not batches:
        raise InputError(f"{where}: the training dataloader gives no batch; give the Trainer a train_dataset")
    return batches


def _from_trainer(trainer: Any, where: str) -> dict[str, Any]:
    args = trainer.args
    accumulation = max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1))
    fields: dict[str, Any] = {"model": trainer.model, "tokenizer": getattr(trainer, "processing_class", None),
                              "dataset": trainer.train_dataset, "collate": trainer.data_collator}
    if trainer.train_dataset is None:
        return fields
    loader = trainer.get_train_dataloader()
    batches = [dict(b) for b in _first_batches(loader, max(2, accumulation), where)]
    if trainer.optimizer is None or trainer.lr_scheduler is None:
        steps = args.max_steps if args.max_steps and args.max_steps > 0 else max(
            1, len(loader) // accumulation * int(max(1, args.num_train_epochs)))
        trainer.create_optimizer_and_scheduler(num_training_steps=steps)

    def loss(model: Any, batch: Mapping[str, Any]) -> Any:
        return trainer.compute_loss(model, dict(batch))

    def accumulate(model: Any, micro_batches: list[Mapping[str, Any]]) -> None:
        """The Trainer's own update: training_step on each micro-batch with the items it counts over them."""
        import torch

        device = next(model.parameters()).device
        samples, items = trainer.get_batch_samples(iter([dict(b) for b in micro_batches]), len(micro_batches),
                                                   device)
        trainer.current_gradient_accumulation_steps = len(samples)
        # training_step calls model.train(); the check compares in the mode it set (dropout off, as the whole
        # update's reference): kept for the duration, the instance's own train() put back after
        model.train = lambda mode=True: model
        try:
            with torch.enable_grad():
                for batch in samples:
                    trainer.training_step(model, batch, items)
        finally:
            del model.train

    fields.update(batches=batches, optimizer=_unwrapped(trainer.optimizer), scheduler=trainer.lr_scheduler,
                  loss=loss, accumulate=accumulate, **_trainer_checkpointing(trainer))
    return fields


CHECKPOINT_METHODS = ("save_model", "_save_optimizer_and_scheduler", "_save_rng_state", "_load_from_checkpoint",
                      "_load_optimizer_and_scheduler", "_load_rng_state")


def _trainer_checkpointing(trainer: Any) -> dict[str, Any]:
    """The Trainer's own checkpoint, written and read by its own methods (what its _save_checkpoint and
    train(resume_from_checkpoint=...) call: a subclass that saves no generators or no scheduler is what is
    tested), with the data position beside it; none when this transformers lacks one of them (campaign's own
    checkpoint then)."""
    if not all(callable(getattr(trainer, m, None)) for m in CHECKPOINT_METHODS):
        return {}
    import json
    from pathlib import Path

    def save_checkpoint(directory: Any, model: Any, optimizer: Any, scheduler: Any, position: int) -> None:
        folder = str(directory)
        trainer.save_model(folder)
        trainer._save_optimizer_and_scheduler(folder)
        trainer._save_rng_state(folder)
        (Path(folder) / "campaign_position.json").write_text(json.dumps({"position": position}), encoding="utf-8")

    def load_checkpoint(directory: Any, model: Any, optimizer: Any, scheduler: Any) -> int:
        folder = str(directory)
        trainer._load_from_checkpoint(folder)
        trainer._load_optimizer_and_scheduler(folder)
        trainer._load_rng_state(folder)
        return int(json.loads((Path(folder) / "campaign_position.json").read_text(encoding="utf-8"))["position"])

    return {"save_checkpoint": save_checkpoint, "load_checkpoint": load_checkpoint}


def _from_lightning(made: Any, where: str) -> dict[str, Any]:
    module, loader = made if isinstance(made, tuple) else (made, None)
    if loader is None:
        try:
            loader = module.train_dataloader()
        except Exception as e:       # Lightning's default raises: no dataloader defined on the module
            raise InputError(f"{where}: the LightningModule has no train_dataloader(); return (module, dataloader)") \
                from e
    configured = module.configure_optimizers()
    optimizer, scheduler = _lightning_optimizers(configured, where)

    def loss(model: Any, batch: Any) -> Any:
        if isinstance(batch, Mapping) and batch and all(k == f"{POSITION}{i}" for i, k in enumerate(batch)):
            batch = tuple(batch.values())            # a tuple batch, handed back as the tuple it was
        out = model.training_step(batch, 0)
        return out["loss"] if isinstance(out, Mapping) else out

    batches = _first_batches(loader, 2, where)
    if not all(isinstance(b, Mapping) for b in batches):
        # an (x, y) batch: named by position so the checks can move and slice its tensors
        batches = [{f"{POSITION}{i}": v for i, v in enumerate(b)} for b in batches]
    return {"model": module, "batches": batches, "optimizer": optimizer, "scheduler": scheduler, "loss": loss,
            "dataset": getattr(loader, "dataset", None), "collate": getattr(loader, "collate_fn", None)}


def _lightning_optimizers(configured: Any, where: str) -> tuple[Any, Any]:
    import torch

    scheduler = None
    if isinstance(configured, Mapping):
        optimizer = configured.get("optimizer")
        sched = configured.get("lr_scheduler")
        scheduler = sched.get("scheduler") if isinstance(sched, Mapping) else sched
    elif isinstance(configured, (list, tuple)) and configured:
        first = configured[0]
        optimizer = first[0] if isinstance(first, (list, tuple)) else first
        if len(configured) > 1:
            rest = configured[1]
            sched = rest[0] if isinstance(rest, (list, tuple)) and rest else rest
            scheduler = sched.get("scheduler") if isinstance(sched, Mapping) else sched
    else:
        optimizer = configured
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InputError(f"{where}: configure_optimizers() gave {type(optimizer).__name__}, not a torch optimizer")
    return optimizer, scheduler


def _unwrapped(optimizer: Any) -> Any:
    while hasattr(optimizer, "optimizer") and not _named(optimizer, "torch.optim", "Optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


__all__ = ["from_loop", "is_lightning", "is_trainer"]
