"""Settings for the frameworks a researcher trains with, judged by the schedule each framework
builds from them: DDP's and Horovod's (:mod:`fusionopt.advice.allreduce`), FSDP2's, DeepSpeed
ZeRO-3's and ZeRO-2's and Megatron-LM's (:mod:`fusionopt.advice.sharded`). Above the solvers:
the advice solves problems with them."""
