"""Compute times calibrated against measured training steps on one H100 (the zoo's default).

The rule, for each layer of an architecture (:class:`~fusionopt.zoo.Layer`) and each
pass (forward, backward), at ``batch`` samples per step on the H100, in seconds::

    t(batch) = c + w_32 * batch / 32

``c`` (:attr:`Calibration.layer_cost`) is what a layer costs whatever its work: its kernel
launches and the small kernels around it. ``w_32`` is the layer's work at 32 samples beyond
``c``, which grows in proportion to the batch (the GPU is busy with it). Where ``w_32`` comes from:

* **A model measured on the H100** (``fusionopt/zoo/measured/<model>-h100-b32.json``, fp32,
  batch 32, :func:`fusionopt.integrations.profile_model`) with the architecture it was
  measured with: the measured time ``m`` of the layer (its tensors' times summed), capped at
  ``e = 32 * work * k / R``, the time its work takes at the *floor rate* ``R`` of its kind
  (``k`` = 1 forward, :data:`BACKWARD_WORK` backward)::

      w_32 = max(min(m, e) - c, 0)

  The cap removes host time: the profiler's hooks cost host time at every layer, and where a
  layer's GPU work is shorter (many small layers at batch 32) the GPU waits for the host and
  ``m`` is the host's time. A time the layer's work cannot explain at the slowest rate its
  kind runs at is not charged. So at batch 32 a layer gets ``max(min(m, e), c)``.
* **Any other model or configuration** (``resnet18``, ``resnet152``, ``vgg19``, ``alexnet``,
  ``densenet201``, ``gpt2-medium``, or a measured model with another ``seq_len``,
  ``image_size`` or ``num_classes``): ``w_32 = 32 * work * k / R_ref``, with ``R_ref`` the
  *effective rate* of the layer's kind and pass in the nearest measured model
  (:data:`REFERENCE`): the kind's work over its ``w_32`` summed over that model's layers. A
  kind the reference lacks runs at its floor rate.

A layer's ``work`` (:func:`work`) is its forward FLOPs per sample for convolutions, linear
layers (with the attention products where a layer carries them) and LSTMs, and its output
elements per sample for the memory-bound kinds (normalisations, depthwise convolutions);
embeddings and bare parameters do no work and cost ``c``. Kinds share three floor rates
(:attr:`Calibration.floor_rates`): ``conv`` (dense convolutions), ``memory`` (norms,
depthwise convolutions) and ``linear`` (linear layers, LSTMs).

**bf16** (``torch.autocast`` with bfloat16, float32 parameters and gradients): ``w_32`` is
divided by the speedup of the model's family (:attr:`Calibration.bf16_speedup`), fitted to
one plain bf16 step per family (ResNet-50 at 64, BERT-base at 32, GPT-2 at 8). This is thin
data: one batch per family, and these cases run partly host-bound, so the rule likely
understates the bf16 speedup at large batches. ``c`` and the update do not change.

**The optimiser**: SGD with momentum on float32 parameters (torch's ``foreach``
implementation), :func:`update_time`: ``u_tensor * tensors + 4 * parameters / u_bandwidth``;
``zoo.profile(..., optimizer="sgd")`` gives each tensor its share (:func:`tensor_update_times`)
as its ``update`` time (not an update lump, which layerwise sync and the decoupled step refuse).

The constants (:data:`H100`) are the least-squares fit of the fp32 plain steps measured on the
H100 (``fusionopt/zoo/measured/h100-steps.json``), by :func:`fusionopt.zoo.fitting.fit_h100`;
``python validation/zoo/run.py`` compares the rule with every stored step.

Examples
--------
>>> from fusionopt.zoo import conv2d
>>> work(conv2d("c", 64, 64, 3, out=56)), work(conv2d("dw", 64, 64, 3, out=56, groups=64))
(231211008.0, 200704.0)
>>> H100.layer_cost
3.32e-05
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

import numpy as np

from fusionopt.zoo._catalog import architecture
from fusionopt.zoo._layers import NORM_FLOPS_PER_ELEMENT, Architecture, Layer
from fusionopt.zoo._measured import measured_profile, measured_profiles

__all__ = ["BACKWARD_WORK", "Calibration", "FAMILY", "H100", "MEASURED_BATCH", "MEASURED_HARDWARE",
    "PARAMETER_BYTES", "PRECISIONS", "RATE_OF_KIND", "REFERENCE", "bf16_speedup", "capped_work", "effective_rates",
    "is_measured", "layer_times", "measured_layer_times", "measured_work", "reference_of", "step_time",
    "tensor_update_times", "update_time", "work", "work_arrays"]

MEASURED_BATCH = 32
MEASURED_HARDWARE = "h100"
# Backward does twice the forward's work: each forward product has two in backward.
BACKWARD_WORK = 2.0
# Bytes per parameter the optimiser reads and writes (float32 master weights).
PARAMETER_BYTES = 4

# The floor rate that runs each kind's work (None: the kind does no work).
RATE_OF_KIND: dict[str, str | None] = {
    "conv": "conv", "depthwise": "memory", "norm": "memory", "linear": "linear", "lstm": "linear",
    "embedding": None, "other": None,
}

# The measured model whose effective rates stand in for a model the H100 did not measure.
REFERENCE = {
    "resnet18": "resnet50",
    "resnet152": "resnet101",
    "vgg19": "vgg16",
    "alexnet": "vgg16",
    "densenet201": "densenet121",
    "gpt2-medium": "gpt2",
}

# The family of each model: the bf16 speedup and the published device figures go by family.
FAMILY = {
    **{name: "cnn" for name in ("resnet18", "resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet",
                                "googlenet", "inception-v3", "densenet121", "densenet201", "mobilenet-v2")},
    "vit-b16": "encoder", "bert-base": "encoder", "bert-large": "encoder",
    "gpt2": "decoder", "gpt2-medium": "decoder",
    "lstm-lm": "rnn",
}

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class Calibration:
    """The constants of the calibrated rule for one device.

    Parameters
    ----------
    layer_cost : float
        ``c``, seconds per layer and pass.
    floor_rates : mapping
        ``conv`` and ``linear`` in FLOP/s, ``memory`` in output elements per second.
    update_per_tensor : float
        Seconds of the optimiser step per parameter tensor.
    update_bandwidth : float
        Parameter bytes the optimiser step gets through per second (B/s).
    bf16_speedup : mapping
        Family -> the factor bf16 divides a layer's work by.
    data : str
        What the constants were fitted to.
    """

    layer_cost: float
    floor_rates: Mapping[str, float]
    update_per_tensor: float
    update_bandwidth: float
    bf16_speedup: Mapping[str, float] = field(default_factory=dict)
    data: str = ""


H100 = Calibration(
    layer_cost=3.32e-05,
    floor_rates={"conv": 3.38e12, "memory": 8.34e10, "linear": 2.75e13},
    update_per_tensor=1.58e-06,
    update_bandwidth=3.53e11,
    bf16_speedup={"cnn": 1.28, "encoder": 1.36, "decoder": 2.85},
    data=("one NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, 2026-11-27: the layer times profile_model measured "
          "at batch 32 (fusionopt/zoo/measured/<model>-h100-b32.json) and the plain steps of "
          "fusionopt/zoo/measured/h100-steps.json"),
)


def work(layer: Layer) -> float:
    """A layer's work per sample: forward FLOPs, or output elements for memory-bound kinds.

    Norms (BatchNorm, LayerNorm) count :data:`~fusionopt.zoo.NORM_FLOPS_PER_ELEMENT`
    FLOPs per output element; a depthwise ``k x k`` convolution ``2 k^2``.

    >>> from fusionopt.zoo import batchnorm2d, embedding
    >>> work(batchnorm2d("bn", 64, out=56)), work(embedding("emb", 10, 4))
    (200704.0, 0.0)
    """
    if RATE_OF_KIND.get(layer.kind) is None:
        return 0.0
    if layer.kind == "norm":
        return float(layer.flops / NORM_FLOPS_PER_ELEMENT)
    if layer.kind == "depthwise":
        kernel = layer.tensors[0][1]
        return float(layer.flops / (2.0 * kernel[-1] * kernel[-2]))
    return float(layer.flops)


def _work_arrays(arch: Architecture, calibration: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: its work per sample and the floor rate of its kind (inf where no work)."""
    works = np.array([work(layer) for layer in arch.layers])
    rates = np.array([calibration.floor_rates[RATE_OF_KIND[layer.kind]] if RATE_OF_KIND.get(layer.kind) else math.inf
                      for layer in arch.layers])
    return works, rates


@lru_cache(maxsize=None)
def _measured_tensor_times(model: str) -> dict[str, tuple[float, float]]:
    measured = measured_profile(model, hardware=MEASURED_HARDWARE, batch=MEASURED_BATCH)
    return {name: (float(f), float(b)) for name, f, b in zip(measured.names, measured.forward, measured.backward)}


def measured_layer_times(model: str, arch: Architecture) -> tuple[np.ndarray, np.ndarray]:
    """The forward and backward time of each layer of ``arch`` in the H100 profile of
    ``model`` at batch 32 (its tensors' times summed), seconds.

    >>> from fusionopt import zoo
    >>> forward, backward = measured_layer_times("vgg16", zoo.architecture("vgg16"))
    >>> round(float(forward.sum() * 1e3), 2), round(float(backward.sum() * 1e3), 2)   # F, B in ms
    (9.19, 18.45)
    """
    times = _measured_tensor_times(model)
    forward = np.array([sum(times[t][0] for t, _ in layer.tensors) for layer in arch.layers])
    backward = np.array([sum(times[t][1] for t, _ in layer.tensors) for layer in arch.layers])
    return forward, backward


def measured_work(model: str, arch: Architecture, calibration: Calibration = H100) -> tuple[np.ndarray, np.ndarray]:
    """``w_32`` of each layer of a measured model (module docstring), forward and backward, seconds."""
    forward, backward = measured_layer_times(model, arch)
    works, rates = _work_arrays(arch, calibration)
    c = calibration.layer_cost
    return capped_work(forward, works, rates, c, 1.0), capped_work(backward, works, rates, c, BACKWARD_WORK)


def capped_work(measured: np.ndarray, works: np.ndarray, rates: np.ndarray, layer_cost: float,
                factor: float) -> np.ndarray:
    """``w_32 = max(min(m, e) - c, 0)`` with ``e = 32 * work * factor / rate`` (seconds; the
    module docstring), element-wise over layers.

    >>> w = capped_work(np.array([1e-2, 1e-4]), np.array([1e9, 1e9]), np.array([1e13, 1e13]), 1e-5, 2.0)
    >>> [round(float(x), 8) for x in w]   # the first is capped at 2 * 32 * 1e9 / 1e13 = 6.4e-3
    [0.00639, 9e-05]
    """
    cap = factor * MEASURED_BATCH * works / rates
    return np.maximum(np.minimum(measured, cap) - layer_cost, 0.0)


def work_arrays(arch: Architecture, calibration: Calibration = H100) -> tuple[np.ndarray, np.ndarray]:
    """Per layer of ``arch``: its work per sample (:func:`work`) and the floor rate of its
    kind (``inf`` for a kind that does no work)."""
    return _work_arrays(arch, calibration)


def effective_rates(model: str, calibration: Calibration = H100) -> dict[tuple[str, str], float]:
    """``(kind, pass) -> rate``: each kind's work per second in the measured model ``model``,
    at its ``w_32`` (FLOP/s, or elements/s for memory-bound kinds); ``pass`` is ``"forward"``
    or ``"backward"``. Kinds with no work or no time are left out.

    >>> rates = effective_rates("resnet50")
    >>> sorted({kind for kind, _ in rates})   # fc's time is all host time: capped to nothing
    ['conv', 'norm']
    """
    arch = _default_architecture(model)
    works, _ = _work_arrays(arch, calibration)
    forward, backward = measured_work(model, arch, calibration)
    kinds = np.array([layer.kind for layer in arch.layers])
    rates: dict[tuple[str, str], float] = {}
    for kind in sorted({layer.kind for layer in arch.layers}):
        mask = kinds == kind
        total = float(works[mask].sum()) * MEASURED_BATCH
        for label, seconds, factor in (("forward", forward, 1.0), ("backward", backward, BACKWARD_WORK)):
            spent = float(seconds[mask].sum())
            if total > 0 and spent > 0:
                rates[(kind, label)] = factor * total / spent
    return rates


def is_measured(model: str, arch: Architecture) -> bool:
    """Whether ``arch`` is the configuration of ``model`` the H100 measured (same tensors,
    same FLOPs; the ready order does not matter).

    >>> from fusionopt import zoo
    >>> is_measured("bert-base", zoo.architecture("bert-base")), is_measured("bert-base", zoo.architecture("bert-base", seq_len=64))
    (True, False)
    """
    if model not in _measured_models():
        return False
    default = _default_architecture(model)
    return arch.tensors == default.tensors and math.isclose(arch.flops, default.flops, rel_tol=1e-12)


def reference_of(model: str, arch: Architecture) -> str | None:
    """The measured model whose layer times or rates ``arch`` (an architecture of ``model``)
    gets: ``model`` itself when it was measured, else :data:`REFERENCE`; None if neither.

    >>> from fusionopt import zoo
    >>> reference_of("resnet152", zoo.architecture("resnet152")), reference_of("vgg16", zoo.architecture("vgg16"))
    ('resnet101', 'vgg16')
    """
    if model in _measured_models():
        return model
    return REFERENCE.get(model)


def layer_times(model: str, arch: Architecture, batch: int, precision: str = "fp32",
                calibration: Calibration = H100) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward time of each layer of ``arch`` (an architecture of zoo model
    ``model``) at ``batch`` samples on the H100, seconds (the rule of the module docstring).

    Raises
    ------
    ValueError
        For a precision other than ``"fp32"`` and ``"bf16"``, bf16 for a family without a
        bf16 measurement, or a model with no measured reference.

    Examples
    --------
    At batch 32 a measured model's layer keeps its measured time, capped at its work's time at
    the floor rate and at least ``c`` (VGG-16's first classifier layer, forward, seconds):

    >>> from fusionopt import zoo
    >>> arch = zoo.architecture("vgg16")
    >>> forward, _ = layer_times("vgg16", arch, 32)
    >>> measured, _ = measured_layer_times("vgg16", arch)
    >>> bool(forward[13] == max(min(measured[13], 32 * work(arch.layers[13]) / 2.75e13), H100.layer_cost))
    True
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    reference = reference_of(model, arch)
    if reference is None:
        raise ValueError(f"model {model!r}: no measured model to calibrate its compute against")
    c = calibration.layer_cost
    if reference == model and is_measured(model, arch):
        forward, backward = measured_work(model, arch, calibration)
    else:
        forward, backward = _work_from_rates(arch, effective_rates(reference, calibration), calibration)
    scale = batch / MEASURED_BATCH
    if precision == "bf16":
        scale /= bf16_speedup(model, calibration)
    return c + forward * scale, c + backward * scale


def bf16_speedup(model: str, calibration: Calibration = H100) -> float:
    """The factor bf16 autocast divides ``model``'s layer work by (:attr:`Calibration.bf16_speedup`).

    >>> bf16_speedup("lstm-lm")
    Traceback (most recent call last):
    ...
    ValueError: no bf16 measurement of an rnn model (lstm-lm) on the H100: bf16 is calibrated for cnn, decoder, encoder models; ask for precision='fp32'
    """
    family = FAMILY[model]
    if family not in calibration.bf16_speedup:
        raise ValueError(f"no bf16 measurement of an {family} model ({model}) on the H100: bf16 is calibrated for "
                         f"{', '.join(sorted(calibration.bf16_speedup))} models; ask for precision='fp32'")
    return float(calibration.bf16_speedup[family])


def update_time(arch: Architecture, calibration: Calibration = H100) -> float:
    """Seconds of one SGD-with-momentum step over ``arch``'s parameters (float32).

    >>> from fusionopt import zoo
    >>> arch = zoo.architecture("resnet50")
    >>> update_time(arch) == 161 * 1.58e-06 + 4 * 25557032 / 3.53e11
    True
    """
    tensors = len(arch.tensors)
    return tensors * calibration.update_per_tensor + PARAMETER_BYTES * arch.parameters / calibration.update_bandwidth


def tensor_update_times(arch: Architecture, calibration: Calibration = H100) -> list[float]:
    """Each tensor's share of :func:`update_time`, in forward order: its fixed cost plus its
    float32 bytes over the bandwidth, seconds.

    >>> from fusionopt import zoo
    >>> arch = zoo.architecture("resnet50")
    >>> times = tensor_update_times(arch)
    >>> times[0] == 1.58e-06 + 4 * 64 * 3 * 7 * 7 / 3.53e11, abs(sum(times) - update_time(arch)) < 1e-15
    (True, True)
    """
    return [calibration.update_per_tensor + PARAMETER_BYTES * math.prod(shape) / calibration.update_bandwidth
            for _, shape in arch.tensors]


def step_time(model: str, batch: int, precision: str = "fp32", calibration: Calibration = H100,
              **arch_kwargs: object) -> float:
    """The rule's whole step of ``model`` on the H100 (forward, backward and update, one
    worker), seconds.

    >>> round(step_time("resnet50", 128) * 1e3, 1)   # ms; the plain step measured 72.3 ms
    72.7
    """
    arch = architecture(model, **arch_kwargs)
    forward, backward = layer_times(model, arch, batch, precision, calibration)
    return float(forward.sum() + backward.sum() + update_time(arch, calibration))


def _work_from_rates(arch: Architecture, rates: Mapping[tuple[str, str], float],
                     calibration: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """``w_32`` of each layer from per-kind rates, falling back to the floor rates."""
    works, floors = _work_arrays(arch, calibration)
    forward = np.empty(len(arch.layers))
    backward = np.empty(len(arch.layers))
    for i, layer in enumerate(arch.layers):
        forward[i] = MEASURED_BATCH * works[i] / rates.get((layer.kind, "forward"), floors[i])
        backward[i] = BACKWARD_WORK * MEASURED_BATCH * works[i] / rates.get((layer.kind, "backward"),
                                                                            floors[i])
    return forward, backward


@lru_cache(maxsize=None)
def _default_architecture(model: str) -> Architecture:
    return architecture(model)


@lru_cache(maxsize=None)
def _measured_models() -> frozenset[str]:
    return frozenset(model for model, hardware, batch in measured_profiles()
                     if hardware == MEASURED_HARDWARE and batch == MEASURED_BATCH)
