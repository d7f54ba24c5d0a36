"""Profiles in: measured workloads from PyTorch.

* :func:`fusionopt.integrations.torch.profile_model` times a ``torch.nn.Module`` on CPU or
  CUDA, parameter tensor by parameter tensor (needs ``pip install 'fusionopt[torch]'``).
* :func:`fusionopt.integrations.kineto.profile_from_trace` reads the chrome-trace JSON that
  ``torch.profiler.profile(...).export_chrome_trace`` writes; it does not need torch.

Both return a :class:`~fusionopt.model.profile.Profile` in forward order, and share the rules
of :mod:`fusionopt.integrations._attribution` for turning ready events into backward times.
Profiles also travel as CSV: :meth:`~fusionopt.model.profile.Profile.to_csv` and
:meth:`~fusionopt.model.profile.Profile.read_csv`.
"""

from fusionopt.integrations.kineto import profile_from_trace
from fusionopt.integrations.torch import profile_model

__all__ = ["profile_from_trace", "profile_model"]
