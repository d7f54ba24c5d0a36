"""Framework baselines: what a training framework does by default, as its code runs it
(DDP, Horovod, a parameter server, Megatron-LM, DeepSpeed ZeRO-2 and ZeRO-3, FSDP2,
TorchInductor's bucketing), and the unfused references (WFBP and its decoupled and fully
sharded forms)."""
