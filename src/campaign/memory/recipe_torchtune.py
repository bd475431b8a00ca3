"""A torchtune recipe YAML (`tune run RECIPE --config FILE`) as the workload: the model builder (full, lora_*,
qlora_*), the adapters, the tokenizer's max_seq_len, the batch, checkpointing (every layer or selective), the dtype,
the optimizer and its step in backward, the loss, activation offloading, and FSDP where the recipe is a distributed
one (more than one card)."""
from __future__ import annotations

from typing import Any

from ..errors import InputError
from . import recipe_read as rd

# torchtune's optimizer components
TORCHTUNE_OPTIM = {"torch.optim.AdamW": ("adamw", "foreach"), "torch.optim.Adam": ("adamw", "foreach"),
                   "torch.optim.SGD": ("sgd", "foreach"),
                   "bitsandbytes.optim.PagedAdamW8bit": ("adamw-8bit", "foreach"),
                   # bitsandbytes' 32-bit AdamW (optim_bits 32 by default): two fp32 states a parameter whatever its
                   # dtype, stepped in place (paged: noted by rd.optim)
                   "bitsandbytes.optim.PagedAdamW": ("adamw-32bit", "fused"),
                   "bitsandbytes.optim.PagedAdamW32bit": ("adamw-32bit", "fused"),
                   "bitsandbytes.optim.AdamW": ("adamw-32bit", "fused"),
                   "bitsandbytes.optim.AdamW32bit": ("adamw-32bit", "fused"),
                   "bitsandbytes.optim.AdamW8bit": ("adamw-8bit", "foreach"),
                   "torchao.optim.AdamW8bit": ("adamw-8bit-ao", "foreach"),
                   "torchao.optim.AdamW4bit": ("adamw-4bit", "foreach")}


TORCHTUNE_ATTN = ("q_proj", "k_proj", "v_proj", "output_proj")


# torchtune's loss components -> Workload.loss (memory/loss.py); another component is named as not modelled
TORCHTUNE_LOSSES = {"torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
                    "torchtune.modules.loss.LinearCrossEntropyLoss": "linear",
                    "torchtune.modules.loss.CrossEntropyLoss": "full", "torch.nn.CrossEntropyLoss": "full"}


# torchtune's preference losses (torchtune/rlhf/loss/dpo.py; torchtune.modules.rlhf.loss before 0.5) -> whether
# the recipe runs a reference forward (SimPO is reference-free)
DPO_LOSSES = {f"torchtune.{m}rlhf.loss.{k}": ref for m in ("", "modules.") for k, ref in (
    ("DPOLoss", True), ("RSOLoss", True), ("IPOLoss", True), ("SimPOLoss", False))}
PAIRS = ("x 2: torchtune's DPO recipes run chosen and rejected in one forward (concatenated_forward, "
         "padded_collate_dpo)")
TORCHTUNE_FREES_LOGITS = "torchtune's recipe deletes the logits before loss.backward()"


# torchtune's own chat template around each message (Llama 3's <|start_header_id|>role<|end_header_id|> ... <|eot_id|>,
# the begin-of-text and the assistant header after): at most this many tokens a message, a bound on what it adds
TEMPLATE_TOKENS = 8


def _inference(r: rd.Reader, name: str, d: dict[str, Any]) -> bool:
    """torchtune's inference configs, which share the recipes' model and tokenizer sections: eleuther_eval's (tasks:
    lm-eval scores batch_size sequences of up to max_seq_length tokens, default 8 and 4096: recipes/eleuther_eval.py)
    and the generate recipes' (max_new_tokens: one prompt, its KV cache set up for the prompt's tokens plus
    max_new_tokens: recipes/generate.py setup_caches(batch_size=1, decoder_max_seq_len=prompt.numel() +
    max_new_tokens), dev/generate_v2.py). Read as inference (True); any other file is a training recipe (False)."""
    if "tasks" in d:
        r.set("train", False, f"{name}: tasks (torchtune's eleuther_eval recipe: inference)")
        r.set("batch", rd.whole(d.get("batch_size", 8), f"{name}: batch_size"),
              f"{name}: batch_size" if "batch_size" in d else f"{name} (no batch_size: eleuther_eval's 8)")
        r.set("context", rd.whole(d.get("max_seq_length", 4096), f"{name}: max_seq_length"),
              f"{name}: max_seq_length" if "max_seq_length" in d else f"{name} (no max_seq_length: 4096)")
        r.refuse(f"{name}: tasks", "lm-eval's scoring, which keeps every position's logits and their log-softmax "
                 "over the vocabulary (b x s x V each)", "counted as a prefill that keeps the last position's, which "
                 "is low")
    elif "max_new_tokens" in d:
        r.set("train", False, f"{name}: max_new_tokens (torchtune's generate recipe: inference)")
        r.set("batch", 1, f"{name} (torchtune's generate recipes run one prompt)")
        new = rd.whole(d["max_new_tokens"], f"{name}: max_new_tokens")
        prompt = d.get("prompt")
        texts = [str(v) for v in prompt.values() if v is not None] if isinstance(prompt, dict) else []
        # a token holds at least one character: the prompt's characters bound its tokens
        bound = sum(len(t) for t in texts) + TEMPLATE_TOKENS * (len(texts) + 1)
        r.set("context", new + bound, f"{name}: max_new_tokens + the prompt ({bound} tokens at most: its characters "
                                      f"and {TEMPLATE_TOKENS} template tokens a message)")
        r.use(name, "prompt")
    else:
        return False
    if d.get("dtype") in ("bf16", "fp32", "fp16"):
        r.set("dtype", d["dtype"], f"{name}: dtype")
    if d.get("quantizer"):
        r.refuse(f"{name}: quantizer", "torchao's quantization of the weights before inference",
                 f"the {d.get('dtype', 'bf16')} weights counted, an upper bound")
    if d.get("tensor_parallel_plan") and (r.gpus or 1) > 1:  # dev/generate_v2_distributed.py: the model split
        r.set("shard", "tp", f"{name}: tensor_parallel_plan (over {r.gpus} cards)")
    elif d.get("tensor_parallel_plan"):
        r.refuse(f"{name}: tensor_parallel_plan", "tensor parallelism over the launch's processes",
                 "counted on one card: give --gpus N")
    if d.get("enable_kv_cache") is False:
        r.refuse(f"{name}: enable_kv_cache", "no KV cache", "a KV cache counted, an upper bound")
    r.use(name, "model._component_", "enable_kv_cache", "max_new_tokens", "batch_size", "max_seq_length", "dtype",
          "tokenizer.max_seq_len")  # generate's prompt is truncated to it (counted: the prompt's bound)
    r.account(name, "torchtune", d)
    return True


def is_torchtune(doc: dict[str, Any]) -> bool:
    """A torchtune recipe: its model as a component (the PPO recipe's policy_model)."""
    return any(isinstance(doc.get(k), dict) and "_component_" in doc[k] for k in ("model", "policy_model"))


def read(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    if _inference(r, name, d):
        return
    ppo = "model" not in d  # the PPO recipe's policy_model (is_torchtune)
    model_key = "policy_model" if ppo else "model"
    model = d[model_key]
    component = str(model["_component_"])
    leaf = component.rsplit(".", 1)[-1]
    method = "qlora" if leaf.startswith("qlora_") else "lora" if leaf.startswith("lora_") else "full"
    r.set("method", method, f"{name}: {model_key}._component_")
    r.set("logits_held", False, f"{name} ({TORCHTUNE_FREES_LOGITS})")
    # torchtune runs on several cards only through its *_distributed recipes, which all shard with FSDP
    # (recipes/*_distributed.py: training.shard_model, fully_shard on each layer and the root)
    if r.gpus is not None and r.gpus > 1:
        r.set("shard", "fsdp", f"{name} (over {r.gpus} cards: a torchtune distributed recipe, FSDP)")
    if method != "full":
        # the model is built under training.set_default_dtype(dtype): the LoRA weights in it too (no peft autocast);
        # the QLoRA base is torchao's NF4Tensor, without peft's prepare_model_for_kbit_training
        r.set("peft_autocast", False, f"{name} (torchtune builds the adapters in the recipe's dtype)")
        if method == "qlora":
            r.set("kbit_upcast", False, f"{name} (torchtune's QLoRA: no k-bit preparation, norms in the dtype)")
        if model.get("lora_rank") is not None:
            r.set("lora_rank", rd.whole(model["lora_rank"], f"{name}: model.lora_rank"), f"{name}: model.lora_rank")
        rd.lora_dropout(r, name, model, shown="model.lora_dropout")
        attn = _attn_modules(model.get("lora_attn_modules"), f"{name}: model.lora_attn_modules")
        targets = attn + (["gate_proj", "up_proj", "down_proj"] if model.get("apply_lora_to_mlp") else [])
        if model.get("apply_lora_to_output"):
            r.refuse(f"{name}: model.apply_lora_to_output", "LoRA on the output projection (its adapter, its "
                     "input and its vocabulary-wide output)", "counted without it, which is low")
        names = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
        if targets:
            r.set("lora_targets", tuple(names.get(t, t) for t in targets), f"{name}: model.lora_attn_modules")
    tokenizer = rd.section(d, "tokenizer", name, "torchtune reads a component (_component_: ..., max_seq_len: ...)")
    grpo = "grpo_samples" in d
    rl = grpo or ppo  # the RL recipes read their length, batch and loss themselves (_grpo, _ppo)
    if not rl and tokenizer.get("max_seq_len") is not None:
        r.set("seq_len", rd.whole(tokenizer["max_seq_len"], f"{name}: tokenizer.max_seq_len"),
              f"{name}: tokenizer.max_seq_len")
    elif not rl:  # torchtune truncates nothing: each batch pads to its longest sample
        r.notes.append(f"{name}: tokenizer.max_seq_len {'null' if 'max_seq_len' in tokenizer else 'absent'}: "
                       "torchtune truncates nothing (a batch is as long as its longest sample); the length counted "
                       "is --seq-len's (2048 unless given): give your data's longest")
    loss = d.get("loss")
    component = str(loss.get("_component_", "")) if isinstance(loss, dict) else ""
    pairs = component in DPO_LOSSES
    if grpo:
        _grpo(r, name, d, method)
    elif ppo:
        _ppo(r, name, d)
    elif d.get("batch_size") is not None:
        per = rd.whole(d["batch_size"], f"{name}: batch_size")
        r.set("batch", 2 * per if pairs else per, f"{name}: batch_size" + (f" ({PAIRS})" if pairs else ""))
    _torchtune_ac(r, d, name)
    if d.get("dtype") in ("bf16", "fp32", "fp16"):
        if method == "qlora":  # the compute dtype: the base is NF4 (torchtune's qlora_* builders, quantize_base)
            r.use(name, "dtype")
            r.notes.append(f"{name}: dtype {d['dtype']}: QLoRA's compute dtype; the base is stored in NF4")
        else:
            r.set("dtype", d["dtype"], f"{name}: dtype (torchtune trains in it: no fp32 master copy)")
    optimizer = rd.section(d, "optimizer", name, "torchtune reads a component (_component_: torch.optim.AdamW, ...)")
    if optimizer.get("_component_"):
        table = TORCHTUNE_OPTIM
        if optimizer.get("fused") is True and optimizer["_component_"] in ("torch.optim.AdamW", "torch.optim.Adam"):
            table = {optimizer["_component_"]: ("adamw", "fused")}
            r.use(name, "optimizer.fused")
        elif optimizer.get("foreach") is False and optimizer["_component_"] in ("torch.optim.AdamW",
                                                                               "torch.optim.Adam"):
            table = {optimizer["_component_"]: ("adamw", "loop")}
            r.use(name, "optimizer.foreach")
        rd.optim(r, optimizer["_component_"], f"{name}: optimizer._component_", table)
        r.use(name, *(f"optimizer.{k}" for k in ("fused", "foreach") if k in optimizer))
    rd.accumulation(r, d, name)
    if pairs:
        _preference(r, name, component, method)
    elif component in TORCHTUNE_LOSSES and not rl:
        if isinstance(loss, dict) and loss.get("num_output_chunks", 8) != 8:
            r.refuse(f"{name}: loss", f"{loss['num_output_chunks']!r} output chunks", "counted with torchtune's 8")
        rd.loss(r, TORCHTUNE_LOSSES[component], f"{name}: loss", f"{name}: loss")
    if d.get("optimizer_in_bwd") is True and r.options.get("shard") == "fsdp":
        # full_finetune_distributed steps each sharded parameter in its post-accumulate-grad hook: not modelled
        r.refuse(f"{name}: optimizer_in_bwd", "the optimizer step in backward under FSDP",
                 "counted with the step after backward, an upper bound")
    elif d.get("optimizer_in_bwd") is not None:
        r.set("optimizer_in_backward", d["optimizer_in_bwd"] is True, f"{name}: optimizer_in_bwd" + (
            " (the policy's; the value model's too, not counted)" if ppo else ""))
    if d.get("enable_activation_offloading") is not None:
        r.set("activation_offloading", d["enable_activation_offloading"] is True,
              f"{name}: enable_activation_offloading")
    # training.shard_model(cpu_offload=...): fully_shard(offload_policy=CPUOffloadPolicy()); only the *_distributed
    # recipes read it, and they always shard with FSDP. Older recipes (lora_finetune_fsdp2.py, the first 405B QLoRA
    # config) wrote it as a section, fsdp: {cpu_offload: ...}
    nested = d.get("fsdp") if isinstance(d.get("fsdp"), dict) and set(d["fsdp"]) == {"cpu_offload"} else None
    for key, present, value in (("fsdp_cpu_offload", "fsdp_cpu_offload" in d, d.get("fsdp_cpu_offload")),
                                ("fsdp.cpu_offload", nested is not None, nested and nested["cpu_offload"])):
        if value is True:
            r.set("shard", "fsdp", f"{name}: {key} (a torchtune distributed recipe, FSDP)")
            r.set("offload_params", "cpu", f"{name}: {key}")
        elif present:
            r.use(name, key)
    if r.options.get("shard") == "fsdp" and r.options.get("grad_accumulation", 1) > 1:
        # the distributed recipes call no no_sync: FSDP reduce-scatters every micro-batch's gradients
        r.set("sync_each_batch", True, f"{name}: gradient_accumulation_steps (torchtune's distributed recipes "
                                       "reduce-scatter every micro-batch: no no_sync)")
    _custom_sharded(r, name, d.get("custom_sharded_layers"))
    rd.reshard(r, name, d.get("fsdp_reshard_after_forward"), "fsdp_reshard_after_forward")
    r.use(name, "enable_activation_checkpointing", "model.apply_lora_to_mlp", "model.apply_lora_to_output",
          "model.lora_attn_modules", "tokenizer.max_seq_len")
    r.account(name, "torchtune", d)


def _preference(r: rd.Reader, name: str, component: str, method: str) -> None:
    """torchtune's DPO recipes (lora_dpo_single_device.py, lora_dpo_distributed.py, full_dpo_distributed.py at
    bd2a0fc): the reference forward runs unless the loss is reference-free, on the trained model with its adapters
    disabled (LoRA), or on a frozen copy sharded as the policy is (full). Their log-probabilities come from the
    model's fp32 logits through one log_softmax over the whole vocabulary (rlhf.get_batch_log_probs: --loss
    logsoftmax, memory/loss.py)."""
    where = f"{name}: loss"
    if DPO_LOSSES[component]:
        r.set("reference", "adapters-off" if method != "full" else "copy",
              f"{where} ({'the adapters disabled' if method != 'full' else 'a frozen copy, ref_checkpointer'}: "
              "torchtune's DPO recipes)")
        if method == "full":
            r.use(name, "ref_checkpointer")
    else:
        r.set("reference", "none", f"{where} (a reference-free loss)")
    rd.loss(r, "logsoftmax", f"{where} (torchtune's DPO: rlhf.get_batch_log_probs)", where)


def _grpo(r: rd.Reader, name: str, d: dict[str, Any], method: str) -> None:
    """torchtune's synchronous GRPO recipe (recipes/dev/grpo_full_finetune_distributed.py at bd2a0fc): each card
    generates grpo_samples completions of max_generated_tokens for each of its batch_size prompts (without grad, with
    the policy itself), scores them with the policy and a frozen reference (ref_checkpointer, sharded as the policy),
    then trains on all batch_size x grpo_samples sequences in one forward, their log-probabilities taken row by row
    from the logits (rlhf.batched_logits_to_logprobs, chunk_size 1). The policy is sharded with
    reshard_after_forward=False. What the estimate counts differently is named with its direction."""
    samples = rd.whole(d["grpo_samples"], f"{name}: grpo_samples")
    prompts = rd.whole(d.get("batch_size", 1), f"{name}: batch_size")
    if method != "full":
        r.refuse(f"{name}: model._component_", "adapters in torchtune's GRPO recipe (it trains a full model)",
                 "counted as its builder says")
    rollouts = prompts * samples
    r.set("rollouts", rollouts, f"{name}: batch_size x grpo_samples (generated on each card before the step)")
    r.set("batch", rollouts, f"{name}: batch_size x grpo_samples (grpo_step trains on them in one forward)")
    _rl_generation(r, name, d)
    r.set("reference", "copy", f"{name}: ref_checkpointer (a frozen copy of the policy, sharded as it is)")
    if r.options.get("shard") == "fsdp":
        r.set("reshard_after_forward", False, f"{name} (the GRPO recipe shards the policy with "
                                              "reshard_after_forward=False)")
    if d.get("forward_batch_size") is None:  # the recipe reads cfg.forward_batch_size
        raise InputError(f"{name}: grpo_samples without forward_batch_size; torchtune's GRPO recipe needs it (the "
                         "prompts generated at a time): add it")
    forward = d["forward_batch_size"]
    if rd.whole(forward, f"{name}: forward_batch_size") < prompts:
        r.refuse(f"{name}: forward_batch_size", f"generation {forward} prompt(s) x {samples} at a time",
                 f"all {rollouts} sequences generated at once, an upper bound")
    r.use(name, "batch_size", "grpo_samples", "forward_batch_size", "ref_checkpointer")


def _rl_generation(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """The completion of torchtune's RL recipes: max_generated_tokens after a prompt the tokenizer truncates to its
    max_seq_len (the length is their sum), generated into torchtune's cache set up for both at once."""
    if d.get("max_generated_tokens") is None:
        raise InputError(f"{name}: no max_generated_tokens; torchtune's RL recipes need it (the completion's length): "
                         "add it")
    completion = rd.whole(d["max_generated_tokens"], f"{name}: max_generated_tokens")
    r.set("completion_tokens", completion, f"{name}: max_generated_tokens")
    tokenizer = rd.section(d, "tokenizer", name, "torchtune reads a component (_component_: ..., max_seq_len: ...)")
    if tokenizer.get("max_seq_len") is not None:
        prompt = rd.whole(tokenizer["max_seq_len"], f"{name}: tokenizer.max_seq_len")
        r.set("seq_len", prompt + completion, f"{name}: tokenizer.max_seq_len + max_generated_tokens")
    else:
        r.notes.append(f"{name}: tokenizer.max_seq_len null: the prompts are as long as the data's; --seq-len is the "
                       f"longest prompt + {completion} generated tokens (give it)")
    # torchtune's logits are fp32 over every position (modules/transformer.py unembed: self.output(h).float()); its
    # generate scores the whole prompt at the prefill (generation/_generation.py generate_next_token:
    # model(x, ...)[:, -1])
    r.refuse(f"{name}: max_generated_tokens", "torchtune's generation: a cache allocated for the prompt and every "
             "generated token at once (local_kv_cache), the prefill's fp32 logits over every prompt position, and "
             "the trajectory scored by the policy and the reference with fp32 logits over every position", "counted "
             "as a cache that grows token by token and the last position's logits, which is low")
    rd.loss(r, "logps", f"{name}: loss (the completion's log-probabilities)", f"{name}: loss")
    r.refuse(f"{name}: loss", "the RL loss over torchtune's fp32 logits of the whole sequence, prompt included "
             "(unembed upcasts them: 4 B a position and vocabulary entry), and the log_softmax of the completion's",
             "counted as TRL's logps over the completion's 16-bit logits only, which is low (by up to the whole "
             "sequence's fp32 logits)")


def _ppo(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """torchtune's PPO recipe (recipes/ppo_full_finetune_single_device.py at bd2a0fc): the policy generates
    forward_batch_size prompts' completions at a time (its cache set up for that many), a frozen copy of it
    (ref_policy_checkpointer) scores them, and it trains on ppo_batch_size / gradient_accumulation_steps sequences a
    backward. Its two other models, built from reward_and_value_model (a frozen reward model and a trained value
    model with its own gradients and optimizer states), are named: counted without them, which is low."""
    forward = rd.whole(d.get("forward_batch_size", 1), f"{name}: forward_batch_size")
    ppo_batch = rd.whole(d.get("ppo_batch_size", 1), f"{name}: ppo_batch_size")
    steps = rd.whole(d.get("gradient_accumulation_steps", 1), f"{name}: gradient_accumulation_steps")
    micro = max(1, ppo_batch // steps)
    r.set("batch", micro, f"{name}: ppo_batch_size / gradient_accumulation_steps (a backward's sequences)")
    r.set("rollouts", max(forward, micro), f"{name}: forward_batch_size (the cache's batch in generation)")
    if micro > forward:
        r.refuse(f"{name}: forward_batch_size", f"generation {forward} sequences at a time", f"counted as {micro}, "
                 "the backward's, an upper bound")
    _rl_generation(r, name, d)
    r.set("reference", "copy", f"{name}: ref_policy_checkpointer (a frozen copy of the policy)")
    r.refuse(f"{name}: reward_and_value_model", "PPO's reward model (frozen) and value model (trained: its gradients "
             "and optimizer states), both built from this component", "counted without them, which is low")
    r.use(name, "policy_model._component_", "batch_size", "forward_batch_size", "ppo_batch_size",
          "ref_policy_checkpointer", "enable_kv_cache")
    if d.get("enable_kv_cache") is False:
        r.refuse(f"{name}: enable_kv_cache", "generation without a KV cache (each step a forward over the whole "
                 "sequence, its fp32 logits at every position)", "a KV cache counted, which may be low")


def _torchtune_ac(r: rd.Reader, d: dict[str, Any], name: str) -> None:
    """Activation checkpointing of a torchtune recipe. Without ac_mode, enable_activation_checkpointing wraps every
    layer. The distributed recipes also read ac_mode and ac_option, applied only with enable_activation_checkpointing
    false (full_finetune_distributed.py _setup_model: "(not enable_activation_checkpointing) and (ac_mode is not None)";
    with it true and an ac_mode, neither runs: no checkpointing). training.apply_selective_activation_checkpointing
    (training/_activation_checkpointing.py) wraps every layer for ac_mode full; for selective the blocks counted from 1
    whose count % int(ac_option) == 0 (0: all); any other mode, none. ac_option op is refused (torchtune's int('op')
    raises): op-level checkpointing is torchtitan's."""
    enable, mode = d.get("enable_activation_checkpointing"), d.get("ac_mode")
    if mode is None:
        if enable is not None:
            r.set("grad_checkpointing", bool(enable), f"{name}: enable_activation_checkpointing")
        r.use(name, "ac_option")  # read only with an ac_mode
        return
    r.use(name, "ac_mode", "ac_option", "enable_activation_checkpointing")
    if enable:
        r.set("grad_checkpointing", False, f"{name}: enable_activation_checkpointing with ac_mode (torchtune then "
                                           "applies neither)")
        return
    if mode != "selective":
        r.set("grad_checkpointing", mode == "full", f"{name}: ac_mode {rd.short(mode)}")
        return
    option = d.get("ac_option")
    text = "" if isinstance(option, bool) else str(option).strip()
    if not text.isdigit():
        raise InputError(f"{name}: ac_option {rd.short(option)} with ac_mode selective must be a layer count (2: every "
                         "second layer; torchtune takes int(ac_option)); op-level checkpointing is torchtitan's")
    r.set("grad_checkpointing", True, f"{name}: ac_mode selective")
    if int(text) > 1:
        r.set("checkpoint_every", int(text), f"{name}: ac_option")


def _custom_sharded(r: rd.Reader, name: str, value: Any) -> None:
    """torchtune's custom_sharded_layers (the *_distributed recipes): each module it names becomes an FSDP unit of
    its own (training.shard_model). ['tok_embeddings', 'output'] is modelled (--fsdp-embedding-units); another list
    is left to the key's account, named as not modelled (the root estimate stays: an upper bound). A single-device
    recipe (no FSDP) never reads it: off, changing no memory."""
    if value in (None, [], ()):
        if value is not None:
            r.use(name, "custom_sharded_layers")
        return
    if r.options.get("shard") != "fsdp":
        r.use(name, "custom_sharded_layers")
        r.notes.append(f"{name}: custom_sharded_layers: read by torchtune's distributed recipes only (FSDP); one "
                       "card: no effect")
        return
    if isinstance(value, list) and sorted(value) == ["output", "tok_embeddings"]:
        r.set("fsdp_embedding_units", True, f"{name}: custom_sharded_layers")


def _attn_modules(value: Any, where: str) -> list[str]:
    """torchtune's lora_attn_modules: a list of q_proj, k_proj, v_proj, output_proj (List[LORA_ATTN_MODULES] in its
    builders); a bare string or anything else is refused (the builders test `"q_proj" in lora_attn_modules`, which
    on a string is a substring test)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, str) and m in TORCHTUNE_ATTN for m in value):
        raise InputError(f"{where}: {rd.short(value)} is not a list of {', '.join(TORCHTUNE_ATTN)}; write e.g. "
                         "[q_proj, v_proj]")
    return value
