"""Model zoo: parameter tensors and forward FLOPs of standard networks, and roofline profiles.

The architectures are derived in plain Python (no deep-learning framework) and list their
parameter tensors with the names and shapes of ``model.named_parameters()``, in forward
order (the order the forward first uses them; MODEL.md section 1: ``named_parameters()``
order for every model but ViT-B/16, whose class token follows the patch embedding), in
torchvision (``resnet18``, ``resnet50``, ``resnet101``, ``resnet152``, ``vgg16``,
``vgg19``, ``alexnet``, ``googlenet``, ``inception-v3``, ``densenet121``,
``densenet201``, ``mobilenet-v2``, ``vit-b16``), HuggingFace (``bert-base``,
``bert-large``, ``gpt2``, ``gpt2-medium``) and PyTorch's word-language-model example
(``lstm-lm``).
FLOP counts follow the convention in :mod:`fusionopt.zoo.layers` (a multiply-add is
2 FLOPs; per sample).

:func:`profile` turns an architecture into a :class:`~fusionopt.model.profile.Profile`
with a **roofline ESTIMATE** of the compute times, not a measurement.

Examples
--------
>>> sorted(models())  # doctest: +NORMALIZE_WHITESPACE
['alexnet', 'bert-base', 'bert-large', 'densenet121', 'densenet201', 'googlenet', 'gpt2',
 'gpt2-medium', 'inception-v3', 'lstm-lm', 'mobilenet-v2', 'resnet101', 'resnet152',
 'resnet18', 'resnet50', 'vgg16', 'vgg19', 'vit-b16']
>>> architecture("resnet50").parameters
25557032
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

from fusionopt.model.profile import Profile
from fusionopt.zoo.alexnet import alexnet
from fusionopt.zoo.bert import bert_base, bert_large
from fusionopt.zoo.densenet import densenet121, densenet201
from fusionopt.zoo.devices import PRESETS, Device
from fusionopt.zoo.googlenet import googlenet
from fusionopt.zoo.gpt2 import gpt2, gpt2_medium
from fusionopt.zoo.inception import inception_v3
from fusionopt.zoo.layers import ORDERS, Architecture, Layer, check_positive_int
from fusionopt.zoo.measured import measured_profile, measured_profiles
from fusionopt.zoo.lstm import lstm_lm
from fusionopt.zoo.mobilenet import mobilenet_v2
from fusionopt.zoo.resnet import resnet18, resnet50, resnet101, resnet152
from fusionopt.zoo.vgg import vgg16, vgg19
from fusionopt.zoo.vit import vit_b16

__all__ = [
    "Architecture",
    "Device",
    "Layer",
    "architecture",
    "device",
    "devices",
    "measured_profile",
    "measured_profiles",
    "models",
    "profile",
]

# name -> (builder, one-line description)
_MODELS: dict[str, tuple[Callable[..., Architecture], str]] = {
    "resnet18": (resnet18, "ResNet-18, torchvision layout, 224x224 ImageNet (11.7M parameters)"),
    "resnet50": (resnet50, "ResNet-50 v1.5, torchvision layout, 224x224 ImageNet (25.6M parameters)"),
    "resnet101": (resnet101, "ResNet-101 v1.5, torchvision layout, 224x224 ImageNet (44.5M parameters)"),
    "resnet152": (resnet152, "ResNet-152 v1.5, torchvision layout, 224x224 ImageNet (60.2M parameters)"),
    "vgg16": (vgg16, "VGG-16 without BatchNorm, torchvision layout, 224x224 ImageNet (138.4M parameters)"),
    "vgg19": (vgg19, "VGG-19 without BatchNorm, torchvision layout, 224x224 ImageNet (143.7M parameters)"),
    "alexnet": (alexnet, "AlexNet, torchvision layout, 224x224 ImageNet (61.1M parameters)"),
    "googlenet": (googlenet, "GoogLeNet / Inception v1, torchvision layout, no aux heads, 224x224 (6.6M parameters)"),
    "inception-v3": (inception_v3, "Inception-v3 with aux classifier, torchvision layout, 299x299 (27.2M parameters)"),
    "densenet121": (densenet121, "DenseNet-121, torchvision layout, 224x224 ImageNet (8.0M parameters)"),
    "densenet201": (densenet201, "DenseNet-201, torchvision layout, 224x224 ImageNet (20.0M parameters)"),
    "mobilenet-v2": (mobilenet_v2, "MobileNet-v2, width 1.0, torchvision layout, 224x224 ImageNet (3.5M parameters)"),
    "vit-b16": (vit_b16, "ViT-B/16, torchvision layout, 224x224 ImageNet, 197 tokens (86.6M parameters)"),
    "bert-base": (bert_base, "BERT-base uncased with pooler, HuggingFace layout, seq_len 128 (109.5M parameters)"),
    "bert-large": (bert_large, "BERT-large uncased with pooler, HuggingFace layout, seq_len 128 (335.1M parameters)"),
    "gpt2": (gpt2, "GPT-2 small, HuggingFace GPT2Model, tied LM head, seq_len 1024 (124.4M parameters)"),
    "gpt2-medium": (gpt2_medium, "GPT-2 medium, HuggingFace GPT2Model, tied LM head, seq_len 1024 (354.8M parameters)"),
    "lstm-lm": (lstm_lm, "2-layer LSTM LM (Zaremba large), PyTorch example layout, PTB, seq_len 35 (66.0M parameters)"),
}


def _lookup(kind: str, name: object, known: dict[str, Any]) -> str:
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in known:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")
    return key


def models() -> dict[str, str]:
    """The available models: name -> one-line description.

    Examples
    --------
    >>> models()["resnet50"]
    'ResNet-50 v1.5, torchvision layout, 224x224 ImageNet (25.6M parameters)'
    """
    return {name: desc for name, (_, desc) in _MODELS.items()}


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
    builder, _ = _MODELS[_lookup("model", name, _MODELS)]
    return builder(**kwargs)


def devices() -> dict[str, Device]:
    """The device presets: name -> :class:`Device` (see :mod:`fusionopt.zoo.devices`).

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
    return PRESETS[_lookup("device", name, PRESETS)]


def profile(
    name: str,
    device: str | Device = "h100",
    batch: int = 64,
    dtype_bytes: int = 4,
    order: str = "cuda",
    **arch_kwargs: Any,
) -> Profile:
    """A roofline ESTIMATE of one training step of model ``name``, as a :class:`Profile`.

    **This is an estimate, not a measurement.** Each layer's forward time is
    ``flops * batch / (peak_flops * efficiency)`` seconds, its backward time twice that;
    both go on the layer's **last** tensor in forward order (its bias, where it has one)
    and 0 on its other tensors, as :func:`fusionopt.integrations.torch.profile_model`
    attributes measured times: the layer's backward makes all of its gradients ready
    (``r_i = sum_{k >= i} b_k`` then counts it for every one of them), and under
    ``sync="layerwise"`` its forward waits for all of its tensors. Real kernels do not run at a fixed fraction of peak:
    small, memory-bound layers (normalisation, embeddings, depthwise or 1x1 convs at
    small batch) are much slower than this predicts and layers without parameters
    (activations, pooling, softmax) are not counted at all. Use measured profiles for
    any conclusion that depends on absolute compute times.

    Parameters
    ----------
    name : str
        Model name, see :func:`models`.
    device : str or Device
        Device preset name (see :func:`devices`) or a :class:`Device`; default ``"h100"``.
    batch : int
        Samples per device per step (positive integer); default 64.
    dtype_bytes : int
        Bytes per gradient element (default 4: FP32 gradients, as in mixed-precision
        training with FP32 master weights).
    order : {"cuda", "cpu"}
        The device whose ready order (the order autograd makes gradients ready) the profile
        carries; default ``"cuda"``, as the presets are GPUs. The two differ only where a
        layer runs as one backward node on CUDA (``lstm-lm``: cuDNN's LSTM makes its eight
        gradients ready together, see :mod:`fusionopt.zoo.lstm`). The CPU orders are checked
        against autograd by the tests; the CUDA orders of the twelve models profiled on an
        H100 (``fusionopt/zoo/measured``) equal the zoo's. ``metadata["ready_order_for"]``
        records it.
    **arch_kwargs
        Passed to :func:`architecture`, e.g. ``seq_len=128`` for ``bert-base``.

    Returns
    -------
    Profile
        One tensor per parameter tensor, in forward order and with the
        ``named_parameters()`` names; sizes ``numel * dtype_bytes`` bytes; times in seconds; ``name`` is the
        model name; ``metadata`` records the source ("roofline estimate"), device,
        batch, peak_flops (FLOP/s) and efficiency.

    Raises
    ------
    ValueError
        For an unknown model or device, or a batch or dtype_bytes that is not a positive
        integer.

    Examples
    --------
    >>> p = profile("resnet50", device="v100", batch=32)
    >>> p.n, p.total_bytes == 4 * architecture("resnet50").parameters
    (161, True)
    >>> p.metadata["source"], bool(p.backward[0] == 2 * p.forward[0]), float(p.forward[1])
    ('roofline estimate', True, 0.0)
    >>> p.names[1:3], round(p.F * 1e3, 3)   # bn1 on its bias, not its weight; F in ms
    (('bn1.weight', 'bn1.bias'), 5.263)
    >>> bool(p.forward[2] > 0), bool(p.ready_times[1] == p.ready_times[2])
    (True, True)
    >>> profile("resnet50", batch=0)
    Traceback (most recent call last):
    ...
    ValueError: batch must be a positive integer, got 0
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: choose one of {', '.join(ORDERS)}")
    builder, _ = _MODELS[_lookup("model", name, _MODELS)]
    if "order" in inspect.signature(builder).parameters:
        arch_kwargs = {**arch_kwargs, "order": order}
    arch = architecture(name, **arch_kwargs)
    dev = device if isinstance(device, Device) else _preset(device)
    batch = check_positive_int("batch", batch)
    dtype_bytes = check_positive_int("dtype_bytes", dtype_bytes)
    throughput = dev.peak_flops * dev.efficiency  # FLOP/s
    names: list[str] = []
    sizes: list[int] = []
    forward: list[float] = []
    shapes: list[tuple[int, ...]] = []
    for layer in arch.layers:
        seconds = layer.flops * batch / throughput
        for k, (tname, shape) in enumerate(layer.tensors):
            names.append(tname)
            sizes.append(math.prod(shape) * dtype_bytes)
            shapes.append(tuple(shape))
            forward.append(seconds if k == len(layer.tensors) - 1 else 0.0)
    return Profile.from_arrays(
        sizes,
        forward,
        [2.0 * f for f in forward],
        names,
        name=arch.name,
        dtype_bytes=dtype_bytes,
        ready_order=arch.ready_order,
        registration_order=list(arch.registration),
        shapes=shapes,
        metadata={
            "source": "roofline estimate",
            "device": dev.name,
            "batch": batch,
            "peak_flops": dev.peak_flops,
            "efficiency": dev.efficiency,
            "ready_order_for": order,
        },
    )
