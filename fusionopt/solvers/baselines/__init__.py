"""Framework baselines: what a training framework does by default, as its code runs it
(DDP, with torch's PowerSGD hook too, Horovod, a parameter server, Megatron-LM, DeepSpeed ZeRO-2 and ZeRO-3, FSDP2,
TorchInductor's bucketing), and the unfused references (WFBP and its decoupled and fully
sharded forms)."""

from fusionopt.solvers.baselines._ddp import ddp_buckets
from fusionopt.solvers.baselines._ddp_powersgd import ddp_powersgd
from fusionopt.solvers.baselines._fsdp2 import fsdp2_plan
from fusionopt.solvers.baselines._inductor import inductor_cap_mb, inductor_plan
from fusionopt.solvers.baselines._megatron import megatron_buckets
from fusionopt.solvers.baselines._ps import ps_default, ps_layer
from fusionopt.solvers.baselines._wfbp import wfbp
from fusionopt.solvers.baselines._zero2 import ZERO_REDUCE_BUCKET, zero2_buckets
from fusionopt.solvers.baselines._zero3 import PREFETCH_BUCKET_SIZE, zero3_plan

__all__ = [
    "PREFETCH_BUCKET_SIZE", "ZERO_REDUCE_BUCKET", "ddp_buckets", "ddp_powersgd", "fsdp2_plan", "inductor_cap_mb", "inductor_plan",
    "megatron_buckets", "ps_default", "ps_layer", "wfbp", "zero2_buckets", "zero3_plan",
]
