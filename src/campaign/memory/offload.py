"""CPU offload: what leaves the card for host RAM, and the host RAM it takes (bytes per process: one rank, one card;
a node holds one such share per card on it).

ZeRO-Offload (DeepSpeed zero_optimization.offload_optimizer {"device": "cpu"}, stages 1, 2 and 3; --offload-optimizer
cpu): stage_1_and_2.py keeps each rank's fp32 master partition on the CPU (single_partition_of_fp32_groups ...
.to("cpu"), pinned), gives it a CPU fp32 gradient buffer (async_inplace_copy_grad_to_fp32_buffer_from_gpu: each
reduced gradient copied into it during backward) and steps it with DeepSpeedCPUAdam, whose exp_avg / exp_avg_sq are
made on the master's device (the CPU); the card keeps the 16-bit weights whole, the 16-bit gradients and the reduce
buckets. Stage 3 (stage3.py, self.device = cpu under offload_optimizer) puts there the fp32 partitions
(_create_fp32_partitions), their fp32 gradients (initialize_optimizer_states: subgroup_gradient_buffer) and also the
16-bit gradient partition (grad_partitions_flat_buffer, made on self.device); the card keeps the reduce bucket.

Parameter offload (--offload-params cpu). ZeRO-3 (offload_param {"device": "cpu"}, ZeRO-Infinity's CPU case): each
16-bit parameter partition is made on the CPU (partition_parameters.py _partition_param: device = remote_device,
except a persistent parameter's, kept on the card) and stage3.py keeps them in pinned flat CPU buffers
(_create_param_groups_fp16_flat_cpu_memory); the card gathers a module's parameters as it runs (the prefetch and
reuse bounds of memory/deepspeed.py hold as without offload). FSDP (CPUOffload(offload_params=True); FSDP2's
CPUOffloadPolicy): the sharded parameters, their sharded gradients and so the optimizer states live on the CPU and the
optimizer steps there; the card holds the unsharded parameters of the units being computed and the unsharded
gradients of a unit until its reduce-scatter, whose shard is copied to the CPU.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..models.spec import ModelSpec
from .breakdown import Item
from .constants import FP32_BYTES
from .deepspeed import grad_bytes, persistent_params, zero_settings
from .dtypes import ELEMENT_BYTES
from .states import adapter_dtype, optimizer_bytes, state_bytes_per_element, trainable_params, weight_bytes
from .workload import Workload

STAGE1_2 = "deepspeed/runtime/zero/stage_1_and_2.py"
STAGE3 = "deepspeed/runtime/zero/stage3.py"
PARTITION = "deepspeed/runtime/zero/partition_parameters.py"
FSDP = ("torch.distributed.fsdp CPUOffload(offload_params=True) (FSDP2: CPUOffloadPolicy, "
        "_fully_shard/_fsdp_param.py): sharded parameters and gradients on the CPU, the optimizer step on the CPU")
SOURCE = (f"{STAGE1_2} cpu_offload: single_partition_of_fp32_groups on the CPU, pinned; stepped by DeepSpeedCPUAdam "
          "(deepspeed/ops/adam/cpu_adam.py)")
SOURCE3 = (f"{STAGE3} _create_fp32_partitions under offload_optimizer: fp16_partitioned_groups_flat[i]"
           ".to(subgroup_to_device[i]).float(), the CPU; stepped by DeepSpeedCPUAdam (deepspeed/ops/adam/cpu_adam.py)")


def offloaded(w: Workload) -> bool:
    """The optimizer (fp32 master or sharded parameters, states, a gradient partition) lives in host RAM and steps on
    the CPU: ZeRO-Offload, or FSDP's CPU offload of the parameters."""
    return w.training and ((w.offload_optimizer == "cpu" and w.shard in ("zero1", "zero2", "zero3"))
                           or fsdp_offloaded(w))


def params_offloaded(w: Workload) -> bool:
    """The parameters live in host RAM and are gathered to the card as they are used (ZeRO-3 or FSDP)."""
    return w.training and w.offload_params == "cpu" and w.shard in ("zero3", "fsdp")


def fsdp_offloaded(w: Workload) -> bool:
    """FSDP with CPUOffload(offload_params=True): parameters, gradients and optimizer states in host RAM."""
    return w.training and w.offload_params == "cpu" and w.shard == "fsdp"


@dataclass(frozen=True)
class HostMemory:
    """Host RAM one training process holds for what is offloaded (bytes per process: one per card of the node)."""

    items: tuple[Item, ...]

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    def to_dict(self) -> dict:
        return {"bytes_per_process": self.bytes, "items": [asdict(i) for i in self.items]}


def _div(n: int | float, parts: int) -> int:
    return int(-(-int(n) // parts))


def zero3_card_params(spec: ModelSpec, w: Workload) -> int:
    """ZeRO-3 with offload_param: the elements of the parameters kept on the card, the persistent ones (at most
    stage3_param_persistence_threshold elements each), whose partition partition_parameters.py makes on the card."""
    z = zero_settings(spec, w)
    return persistent_params(spec, z.persistence_threshold) if z is not None else 0


def host_memory(spec: ModelSpec, w: Workload) -> HostMemory | None:
    """Host RAM per process for what is offloaded, or None when nothing is."""
    if not (offloaded(w) or params_offloaded(w)):
        return None
    Pt = trainable_params(spec, w)
    N = w.gpus
    per = f" / {N} cards" if N > 1 else ""
    items: list[Item] = []
    if fsdp_offloaded(w):
        wb = weight_bytes(spec, w)
        dt = "fp32, AMP master" if w.mixed_precision and w.base_trainable else "as stored"
        items.append(Item("sharded parameters (host)", _div(wb.total, N), f"the model's weights ({dt}): "
                          f"{wb.total:,} B{per}", "weights", FSDP))
        if w.adapters and Pt:
            a = ELEMENT_BYTES[adapter_dtype(w)]
            items.append(Item("sharded LoRA adapter weights (host)", _div(a * Pt, N),
                              f"{Pt:,} x {a:g} B{per}", "weights", FSDP))
        if Pt:
            s = state_bytes_per_element(w)
            states = optimizer_bytes(spec, w, Pt)
            items.append(Item("sharded gradients (host)", _div(s * Pt, N), f"trainable params x {s:g} B = {Pt:,} x "
                              f"{s:g}{per}: each unit's reduce-scattered shard copied to the CPU", "gradients", FSDP))
            items.append(Item("optimizer states (host)", _div(states.bytes, N), states.formula + per, "optimizer",
                              "torch.optim: states made like the parameters they step, on the CPU"))
        return HostMemory(tuple(items))
    stage3 = w.shard == "zero3"
    if params_offloaded(w):  # ZeRO-3 offload_param
        c = grad_bytes(w)
        wb = weight_bytes(spec, w)
        kept = zero3_card_params(spec, w)
        items.append(Item("16-bit parameter partitions (host)", _div(wb.total - int(kept * c), N),
                          f"(the model's weights {wb.total:,} B - persistent parameters {kept:,} x {c:g} B, kept on "
                          f"the card){per}", "weights",
                          f"{PARTITION} _partition_param: torch.empty(partition_size, device=remote_device) (the "
                          f"CPU, but for ds_persist parameters); {STAGE3} _create_param_groups_fp16_flat_cpu_memory: "
                          "pinned flat CPU buffers"))
        if w.adapters and Pt:
            a = ELEMENT_BYTES[adapter_dtype(w)]
            items.append(Item("LoRA adapter partitions (host)", _div(a * Pt, N), f"{Pt:,} x {a:g} B{per}", "weights",
                              f"{PARTITION} _partition_param"))
    if offloaded(w) and Pt:  # ZeRO-Offload: the optimizer on the CPU
        states = optimizer_bytes(spec, w, Pt)
        items += [
            Item("fp32 master weights (host)", _div(FP32_BYTES * Pt, N),
                 f"4 B x trainable params{per} = {Pt:,} x 4{per}", "optimizer", SOURCE3 if stage3 else SOURCE),
            Item("optimizer states (host)", _div(states.bytes, N), states.formula + per, "optimizer",
                 "DeepSpeedCPUAdam: exp_avg, exp_avg_sq made like the CPU master partition"),
            Item("fp32 gradient partition (host)", _div(FP32_BYTES * Pt, N),
                 f"4 B x trainable params{per}: the CPU gradient buffer of the master partition", "gradients",
                 f"{STAGE3} initialize_optimizer_states: fp32_partitioned_groups_flat[i].grad = "
                 "subgroup_gradient_buffer (torch.zeros(num_elements, device=self.device), the CPU); filled in "
                 "partition_grads" if stage3 else
                 f"{STAGE1_2} __init__: single_partition_of_fp32_groups[i].grad = torch.zeros(partition_size, "
                 "device=self.device), the CPU under cpu_offload; filled by "
                 "async_inplace_copy_grad_to_fp32_buffer_from_gpu")]
        if stage3:
            g = grad_bytes(w)
            items.append(Item("16-bit gradient partition (host)", _div(g * Pt, N),
                              f"{g:g} B x trainable params{per} = {Pt:,} x {g:g}{per}", "gradients",
                              f"{STAGE3} _setup_for_real_optimizer: grad_partitions_flat_buffer = torch.zeros("
                              "partition numel, device=self.device), the CPU under offload_optimizer"))
    return HostMemory(tuple(items)) if items else None
