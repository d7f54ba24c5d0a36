"""The zoo's profiles: an architecture's tensors, FLOPs and compute times, calibrated or estimated.

The public face is :mod:`fusionopt.zoo`; its docstring says what the zoo holds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusionopt.model._profile import Profile
from fusionopt.zoo import calibrated, published
from fusionopt.zoo._catalog import MODELS, build, lookup, architecture as _architecture
from fusionopt.zoo._devices import PRESETS, Device
from fusionopt.zoo._layers import Architecture, check_positive_int
from fusionopt.zoo._roofline import roofline_layer_times


# What :func:`profile` can compute the times with, and the optimisers it can add.
COMPUTES = ("calibrated", "roofline")
OPTIMIZERS = (None, "sgd")


def models() -> dict[str, str]:
    """The available models: name -> one-line description.

    Examples
    --------
    >>> models()["resnet50"]
    'ResNet-50 v1.5, torchvision layout, 224x224 ImageNet (25.6M parameters)'
    """
    return {name: desc for name, (_, desc) in MODELS.items()}


def architecture(name: str, **kwargs: Any) -> Architecture:
    """Build the :class:`Architecture` of model ``name`` (see :func:`models`).

    Parameters
    ----------
    name : str
        Model name (case-insensitive), one of the keys of :func:`models`: ``"resnet18"``,
        ``"resnet50"``, ``"resnet101"``, ``"resnet152"``, ``"vgg16"``, ``"vgg19"``,
        ``"alexnet"``, ``"googlenet"``, ``"inception-v3"``, ``"densenet121"``,
        ``"densenet201"``, ``"mobilenet-v2"``, ``"vit-b16"``, ``"bert-base"``,
        ``"bert-large"``, ``"gpt2"``, ``"gpt2-medium"`` or ``"lstm-lm"``.
    **kwargs
        Passed to the builder: ``image_size`` (pixels; default 224, for ``inception-v3``
        299, which is also its minimum; a multiple of 16 for ``vit-b16``) and
        ``num_classes`` (default 1000) for the image models; ``seq_len`` (tokens) for
        the sequence models: default 128 (at most 512) for ``bert-base`` and
        ``bert-large``, 1024 (at most 1024) for ``gpt2`` and ``gpt2-medium``, 35 for
        ``lstm-lm``.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones) or a bad argument value.

    Examples
    --------
    >>> architecture("resnet50").parameters
    25557032
    >>> architecture("bert-base", seq_len=64).input_description
    'one sequence of 64 tokens'
    >>> architecture("resnet51")
    Traceback (most recent call last):
    ...
    ValueError: unknown model 'resnet51'; known: alexnet, bert-base, bert-large, densenet121, densenet201, googlenet, gpt2, gpt2-medium, inception-v3, lstm-lm, mobilenet-v2, resnet101, resnet152, resnet18, resnet50, vgg16, vgg19, vit-b16
    """
    return _architecture(name, **kwargs)


def devices() -> dict[str, Device]:
    """The device presets: name -> :class:`Device` (see :mod:`fusionopt.zoo._devices`).

    Examples
    --------
    >>> sorted(devices())
    ['a100', 'h100', 'k80', 'v100']
    >>> devices()["h100"].peak_flops
    989000000000000.0
    """
    return dict(PRESETS)


def device(name: str) -> Device:
    """The device preset called ``name`` (case-insensitive).

    Raises
    ------
    ValueError
        For an unknown name; the message lists the known ones.

    Examples
    --------
    >>> device("A100").efficiency
    0.4
    >>> device("tpu")
    Traceback (most recent call last):
    ...
    ValueError: unknown device 'tpu'; known: a100, h100, k80, v100
    """
    return _preset(name)


def _preset(name: object) -> Device:
    return PRESETS[lookup("device", name, PRESETS)]


def profile(
    name: str,
    device: str | Device = "h100",
    batch: int = 64,
    dtype_bytes: int = 4,
    order: str = "cuda",
    precision: str | None = None,
    compute: str = "calibrated",
    optimizer: str | None = None,
    **arch_kwargs: Any,
) -> Profile:
    """One training step of model ``name`` on one device, as a :class:`Profile`.

    Each layer's forward and backward time goes on its **last** tensor in forward order
    (its bias, where it has one) and 0 on its other tensors: the layer's backward makes
    all of its gradients ready (``r_i = sum_{k >= i} b_k`` then counts it for every one of
    them), and under ``sync="layerwise"`` its forward waits for all of its tensors.

    ``compute="calibrated"`` (the default) times the step as real training runs it:

    * on ``"h100"``, by the rule of :mod:`fusionopt.zoo.calibrated`: per layer, a fixed cost
      plus work in proportion to the batch, from the layer times measured on one H100 at
      batch 32 (``fusionopt/zoo/measured``) for the twelve models measured there, and from
      the per-kind rates of the nearest measured model for the others (``resnet18``,
      ``resnet152``, ``vgg19``, ``alexnet``, ``densenet201``, ``gpt2-medium``) and for other
      ``seq_len``, ``image_size`` or ``num_classes``; with ``optimizer="sgd"`` its one-worker
      step is within 7% of the plain steps measured on the H100 (``python
      validation/zoo/run.py``);
    * on ``"a100"``, ``"v100"`` and ``"k80"``, the H100's fp32 profile times one factor
      from a published throughput of that device (:mod:`fusionopt.zoo.published`);
    * ``optimizer="sgd"`` adds the optimiser the measured steps ran, SGD with momentum on
      float32 parameters: each tensor's ``update`` time is a fixed cost plus its bytes over a
      bandwidth (:func:`fusionopt.zoo.calibrated.tensor_update_times`, scaled like the rest).
      By default the profile has no update time, as before: the step's other methods and
      bounds (decoupled, layerwise) then apply as they do to forward and backward alone, and
      under barrier sync an update only adds its sum to every plan's step.

    ``compute="roofline"`` is the roofline **ESTIMATE** of :mod:`fusionopt.zoo._roofline`:
    ``flops * batch / (peak_flops * efficiency)`` forward, twice that backward, no optimiser;
    on an H100 it is 3.7x to 196x (median about 11x) faster than measured, so communication
    looks about ten times more dominant than on real hardware.

    Parameters
    ----------
    name : str
        Model name, see :func:`models`.
    device : str or Device
        Device name (see :func:`devices`): ``"h100"`` (default), ``"a100"``, ``"v100"``,
        ``"k80"``. A custom :class:`Device` (a peak and an efficiency) has no
        measurements: only ``compute="roofline"`` takes it.
    batch : int
        Samples per device per step (positive integer); default 64.
    dtype_bytes : int
        Bytes per gradient element (default 4: FP32 gradients, as in fp32 training and in
        bf16 autocast, whose parameters and gradients stay float32). Sizes are ``numel *
        dtype_bytes``; it does not change the times (give 2 for a step that reduces bf16
        gradients).
    order : {"cuda", "cpu"}
        The device whose ready order (the order autograd makes gradients ready) the profile
        carries; default ``"cuda"``, as the presets are GPUs. The two differ only where a
        layer runs as one backward node on CUDA (``lstm-lm``: cuDNN's LSTM makes its eight
        gradients ready together, see :mod:`fusionopt.zoo._lstm`). The CPU orders are checked
        against autograd by the tests; the CUDA orders of the twelve models profiled on an
        H100 (``fusionopt/zoo/measured``) equal the zoo's. ``metadata["ready_order_for"]``
        records it.
    precision : {"fp32", "bf16"}, optional
        For ``compute="calibrated"``: ``"fp32"`` (default; torch's defaults, under which
        cuDNN convolutions may use TF32 and matrix products do not) or ``"bf16"`` (forward
        and loss under ``torch.autocast`` with bfloat16; parameters and gradients stay
        float32). bf16 is calibrated for the convolutional, encoder (BERT, ViT) and decoder
        (GPT-2) models on the H100 and A100; the V100 and K80 have no bfloat16. The roofline
        takes no precision (it assumes a fixed fraction of the tensor-core peak).
    compute : {"calibrated", "roofline"}
        How the times are obtained; default ``"calibrated"``.
    optimizer : {None, "sgd"}
        For ``compute="calibrated"``: ``"sgd"`` gives each tensor the update time of SGD with
        momentum (the optimiser of the measured steps); default None, no update time. The
        roofline has no optimiser.
    **arch_kwargs
        Passed to :func:`architecture`, e.g. ``seq_len=128`` for ``bert-base``.

    Returns
    -------
    Profile
        One tensor per parameter tensor, in forward order and with the
        ``named_parameters()`` names; sizes ``numel * dtype_bytes`` bytes; times in
        seconds; ``name`` is the model name. ``metadata`` says where the times came from:
        ``source`` (``"roofline estimate"``, or the calibration and its data), ``device``,
        ``batch``, ``precision`` and, for calibrated profiles, ``layer_times`` (the measured
        profile or the reference model used), ``update`` and ``device_figure`` (the
        published figure, its source and the factor, off the H100).

    Raises
    ------
    ValueError
        For an unknown model, device, order, precision or compute, a batch or dtype_bytes
        that is not a positive integer, a custom Device or a precision with
        ``compute="calibrated"`` resp. ``"roofline"`` that it cannot take, or a precision
        the device or model family has no data for.

    Examples
    --------
    >>> p = profile("resnet50", batch=128, optimizer="sgd")
    >>> p.n, p.total_bytes == 4 * architecture("resnet50").parameters
    (161, True)
    >>> round(p.F * 1e3, 1), round(p.B * 1e3, 1), round(p.U * 1e3, 2)   # ms; 72.3 measured in all
    (24.1, 48.0, 0.54)
    >>> p.metadata["layer_times"]
    'measured: fusionopt/zoo/measured/resnet50-h100-b32.json'
    >>> v100 = profile("resnet50", device="v100", batch=128)
    >>> round(v100.B / p.B, 2), v100.metadata["device_figure"]["throughput"]
    (4.73, 367.0)
    >>> r = profile("resnet50", device="v100", batch=32, compute="roofline")
    >>> r.metadata["source"], bool(r.backward[0] == 2 * r.forward[0]), float(r.forward[1])
    ('roofline estimate', True, 0.0)
    >>> r.names[1:3], round(r.F * 1e3, 3)   # bn1 on its bias, not its weight; F in ms
    (('bn1.weight', 'bn1.bias'), 5.263)
    >>> bool(r.forward[2] > 0), bool(r.ready_times[1] == r.ready_times[2])
    (True, True)
    >>> profile("resnet50", batch=0)
    Traceback (most recent call last):
    ...
    ValueError: batch must be a positive integer, got 0
    >>> profile("bert-base", device="k80", precision="bf16")
    Traceback (most recent call last):
    ...
    ValueError: no bf16 on 'k80': it has no bfloat16 tensor cores, so the zoo has no bf16 figure for it; ask for precision='fp32'
    """
    if compute not in COMPUTES:
        raise ValueError(f"unknown compute {compute!r}: choose one of {', '.join(COMPUTES)}")
    model = lookup("model", name, MODELS)
    arch = build(model, order, **arch_kwargs)
    batch = check_positive_int("batch", batch)
    dtype_bytes = check_positive_int("dtype_bytes", dtype_bytes)
    if compute == "roofline":
        if precision is not None:
            raise ValueError(f"precision={precision!r} needs compute='calibrated': the roofline estimate takes no "
                             "precision (it assumes a fixed fraction of the device's tensor-core peak)")
        if optimizer is not None:
            raise ValueError(f"optimizer={optimizer!r} needs compute='calibrated': the roofline estimate has no "
                             "optimiser")
        dev = device if isinstance(device, Device) else _preset(device)
        timed = arch
        forward, backward = roofline_layer_times(arch, dev, batch)
        update = [0.0] * len(arch.tensors)
        metadata: dict[str, Any] = {
            "source": "roofline estimate",
            "device": dev.name,
            "batch": batch,
            "peak_flops": dev.peak_flops,
            "efficiency": dev.efficiency,
            "ready_order_for": order,
        }
    else:
        if isinstance(device, Device):
            raise ValueError(f"device {device.name!r} is a custom Device: its peak and efficiency feed only "
                             f"compute='roofline'; the calibrated compute knows {', '.join(sorted(PRESETS))}")
        timed = build(model, "cuda", **arch_kwargs)   # as the H100 ran it
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}: choose None or "
                             f"{', '.join(repr(o) for o in OPTIMIZERS if o)}")
        forward, backward, update, metadata = _calibrated(model, timed, lookup("device", device, PRESETS),
                                                               batch, "fp32" if precision is None else precision)
        if optimizer is None:
            update = np.zeros(len(update))
            metadata["update"] = "none (optimizer='sgd' adds SGD with momentum)"
        metadata["ready_order_for"] = order
    placed = _place_layer_times(timed, forward, backward, arch)
    names = [tname for tname, _ in arch.tensors]
    shapes = [tuple(shape) for _, shape in arch.tensors]
    sizes = [math.prod(shape) * dtype_bytes for shape in shapes]
    tensor_forward = [placed.get(tname, (0.0, 0.0))[0] for tname in names]
    tensor_backward = [placed.get(tname, (0.0, 0.0))[1] for tname in names]
    return Profile.from_arrays(
        sizes,
        tensor_forward,
        tensor_backward,
        names,
        name=arch.name,
        dtype_bytes=dtype_bytes,
        ready_order=arch.ready_order,
        registration_order=list(arch.registration),
        shapes=shapes,
        update=[float(u) for u in update],
        metadata=metadata,
    )


def _place_layer_times(timed: Architecture, forward: Any, backward: Any,
                       arch: Architecture) -> dict[str, tuple[float, float]]:
    """Tensor name -> (forward, backward) seconds: each layer's time on its last tensor.

    ``timed`` and ``arch`` list the same tensors; where ``arch`` splits a layer of ``timed``
    in several (an LSTM's layers on the CPU, one cuDNN node on CUDA), the parts share its
    time in proportion to their FLOPs.
    """
    owner = {tname: k for k, layer in enumerate(arch.layers) for tname, _ in layer.tensors}
    placed: dict[str, tuple[float, float]] = {}
    for layer, f, b in zip(timed.layers, forward, backward):
        parts = [arch.layers[k] for k in dict.fromkeys(owner[tname] for tname, _ in layer.tensors)]
        total = sum(part.flops for part in parts)
        for part in parts:
            share = part.flops / total if total > 0 else 1.0 / len(parts)
            placed[part.tensors[-1][0]] = (float(f) * share, float(b) * share)
    return placed


def _calibrated(model: str, arch: Architecture, device: str, batch: int,
                precision: str) -> tuple[Any, Any, float, dict[str, Any]]:
    """Per-layer forward and backward times, the optimiser's time and the metadata of a
    calibrated profile (:func:`profile`)."""
    if precision not in calibrated.PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: choose one of {', '.join(calibrated.PRECISIONS)}")
    reference = calibrated.reference_of(model, arch)
    on_h100 = device == calibrated.MEASURED_HARDWARE
    forward, backward = calibrated.layer_times(model, arch, batch, precision if on_h100 else "fp32")
    update = np.array(calibrated.tensor_update_times(arch))
    measured_file = f"fusionopt/zoo/measured/{reference}-{calibrated.MEASURED_HARDWARE}-b{calibrated.MEASURED_BATCH}.json"
    if reference == model and calibrated.is_measured(model, arch):
        layer_source = f"measured: {measured_file}"
    else:
        layer_source = f"work at the per-kind rates of {reference} ({measured_file})"
    metadata: dict[str, Any] = {
        "source": "calibrated: " + calibrated.H100.data,
        "compute": "calibrated",
        "device": device,
        "batch": batch,
        "precision": precision,
        "layer_times": layer_source,
        "update": "SGD with momentum on float32 parameters, per tensor (update)",
    }
    if precision == "bf16" and on_h100:
        metadata["bf16_speedup"] = calibrated.bf16_speedup(model)
    if not on_h100:
        factor, figure = published.device_factor(device, model, precision)
        forward, backward, update = forward * factor, backward * factor, update * factor
        metadata["device_figure"] = {
            "model": figure.model, "batch": figure.batch, "precision": figure.precision,
            "throughput": figure.throughput, "source": figure.source, "derived": figure.derived,
            "factor": factor,
        }
    return forward, backward, update, metadata
