"""Profiles in: measured workloads from PyTorch.

* :func:`fusionopt.integrations.torch.profile_model` times a ``torch.nn.Module`` on CPU or
  CUDA, parameter tensor by parameter tensor (needs ``pip install 'fusionopt[torch]'``).
* :func:`fusionopt.integrations.kineto.profile_from_trace` reads the chrome-trace JSON that
  ``torch.profiler.profile(...).export_chrome_trace`` writes; it does not need torch.

Both return a :class:`~fusionopt.model.profile.Profile` in forward order, the step's parts
that belong to no tensor included, and share the rules of
:mod:`fusionopt.integrations._attribution` for turning ready events into backward times.

A data-parallel job's traces say more: :mod:`~fusionopt.integrations.collective_trace` fits
the all-reduce cost and reads the buckets DDP launched, and
:mod:`~fusionopt.integrations.traced_step` predicts the job's step from them against the step
they measured; :mod:`~fusionopt.integrations.ddp_record` records such jobs (gloo, CPU) and
:mod:`~fusionopt.integrations.ddp_layout` reads DDP's buckets with a comm hook.
Profiles also travel as CSV: :func:`~fusionopt.model.profile_csv.write_profile_csv` and
:func:`~fusionopt.model.profile_csv.read_profile_csv`.

Advice out: :func:`~fusionopt.integrations.apply.apply_advice` builds DDP or FSDP2 on a
real model as ``fusionopt advise --json`` says, and
:func:`~fusionopt.integrations.apply.apply_defaults` as the framework's defaults;
:class:`~fusionopt.integrations.emulated_link.EmulatedLink` holds their collectives for a
slower network's time (:func:`~fusionopt.integrations.emulated_link.ddp_comm_hook`,
:func:`~fusionopt.integrations.emulated_link.emulate_fsdp2`).
"""

from fusionopt.integrations.apply import apply_advice, apply_defaults
from fusionopt.integrations.emulated_link import EmulatedLink, ddp_comm_hook, emulate_fsdp2
from fusionopt.integrations.kineto import profile_from_trace
from fusionopt.integrations.torch import profile_model

__all__ = ["EmulatedLink", "apply_advice", "apply_defaults", "ddp_comm_hook", "emulate_fsdp2", "profile_from_trace",
           "profile_model"]
