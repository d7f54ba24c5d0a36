"""A compressor a message may be sent through (MODEL.md section 2.4): what the model needs of
one to price a message by the tensors it carries, not by its bytes alone.

A compressor such as torch's ``powerSGD_hook`` (:class:`~fusionopt.cost.PowerSGD`) sends a
message as several collectives whose sizes depend on the shapes of the tensors in it, and
runs compute of its own. The model asks three things of it:

* :meth:`Compressor.tensor_parts`: per tensor, quantities that add up over a message's
  tensors (bytes of each collective, flops, ...);
* :meth:`Compressor.parts_seconds`: the seconds of a message whose parts add up to given
  sums, on a link's cost;
* :meth:`Compressor.alters`: which tensors' gradients it changes, so that a tensor kept exact
  (``Problem.exact_tensors``) never travels through it.

:attr:`~fusionopt.model.Problem.compressor` makes every message a choice between the cost's
own encodings and the compressor (MODEL.md section 2.4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from fusionopt.model._cost import CommCost
from fusionopt.model._profile import Profile


class Compressor(ABC):
    """What a message sent through a compressor costs, by its content (module docstring)."""

    name: str = "compressor"

    @abstractmethod
    def tensor_parts(self, profile: Profile) -> np.ndarray:
        """A ``(k, n)`` float64 array: per tensor of ``profile`` (columns, forward indices),
        ``k`` quantities that add up over a message's tensors."""

    @abstractmethod
    def parts_seconds(self, cost: CommCost, parts: np.ndarray) -> np.ndarray:
        """Seconds of messages whose :meth:`tensor_parts` add up to ``parts`` (``(k, ...)``),
        on the link ``cost``; 0 for a message of no bytes."""

    @abstractmethod
    def alters(self, profile: Profile) -> np.ndarray:
        """Per tensor of ``profile``, whether the compressor changes its gradient (bool)."""

    @abstractmethod
    def least_seconds(self, cost: CommCost) -> float:
        """A lower bound on the seconds of any message of at least one byte sent through it
        on ``cost``."""


__all__ = ["Compressor"]
