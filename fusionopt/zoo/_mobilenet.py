"""MobileNet-v2 in the layout of ``torchvision.models.mobilenet_v2`` (width multiplier 1.0).

``features`` is an ``nn.Sequential``: ``features.0`` is a 3x3 stride-2 convolution to 32
maps with its BatchNorm (``features.0.0``, ``features.0.1``); ``features.1`` to
``features.17`` are inverted-residual blocks; ``features.18`` is a 1x1 convolution to
1280 maps with its BatchNorm. A block with expansion ratio 6 holds ``conv.0`` (1x1
expansion: ``conv.0.0`` and BatchNorm ``conv.0.1``), ``conv.1`` (3x3 depthwise:
``conv.1.0``, ``conv.1.1``), ``conv.2`` (1x1 linear projection) and BatchNorm ``conv.3``;
the first block (expansion 1) has no expansion, so its depthwise convolution is
``conv.0.0`` and its projection ``conv.1``, BatchNorm ``conv.2``. Convolutions have no
bias. ``classifier`` is Dropout, Linear(1280, classes): index 1.

FLOP convention: :mod:`fusionopt.zoo._layers`; a depthwise convolution costs
``2 * 9 * C * Hout * Wout``. BatchNorm, at 4 FLOPs per element, is about 4% of the
total: MobileNet-v2's convolutions are cheap relative to its activations.
"""

from __future__ import annotations

from fusionopt.zoo._layers import (
    Architecture,
    Layer,
    batchnorm2d,
    check_positive_int,
    conv2d,
    linear,
    out_size,
)

STEM_CHANNELS = 32
LAST_CHANNELS = 1280
# (expansion t, output channels c, blocks n, first stride s), as in the paper's Table 2.
INVERTED_RESIDUAL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _conv_bn(prefix: str, cin: int, cout: int, kernel: int, stride: int, size: int,
             groups: int = 1) -> tuple[list[Layer], int]:
    """torchvision's ``Conv2dNormActivation``: ``prefix.0`` (conv, padding (k-1)/2) and ``prefix.1``."""
    out = out_size(size, kernel, stride, (kernel - 1) // 2)
    return [conv2d(f"{prefix}.0", cin, cout, kernel, out, groups=groups), batchnorm2d(f"{prefix}.1", cout, out)], out


def _inverted_residual(prefix: str, cin: int, cout: int, stride: int, expand: int,
                       size: int) -> tuple[list[Layer], int]:
    """One ``InvertedResidual`` block; returns its layers and the output side."""
    hidden = cin * expand
    layers: list[Layer] = []
    index = 0
    if expand != 1:
        layers, _ = _conv_bn(f"{prefix}.conv.0", cin, hidden, 1, 1, size)
        index = 1
    more, s = _conv_bn(f"{prefix}.conv.{index}", hidden, hidden, 3, stride, size, groups=hidden)
    layers += more
    layers += [
        conv2d(f"{prefix}.conv.{index + 1}", hidden, cout, 1, s),
        batchnorm2d(f"{prefix}.conv.{index + 2}", cout, s),
    ]
    return layers, s


def mobilenet_v2(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """MobileNet-v2 (torchvision layout, width 1.0) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet).
    num_classes : int
        Outputs of the final ``classifier.1`` layer (default 1000).

    Returns
    -------
    Architecture
        52 convolutions (the stem, 2 in the first block, 3 in each of the other 16, the
        1x1 head), 52 BatchNorms and ``classifier.1``: 158 tensors, 3,504,872
        parameters with 1000 classes; about 0.63 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = mobilenet_v2()
    >>> net.parameters, len(net.tensors)
    (3504872, 158)
    >>> net.tensors[3]
    ('features.1.conv.0.0.weight', (32, 1, 3, 3))
    >>> net.tensors[-2]
    ('classifier.1.weight', (1000, 1280))
    """
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    layers, s = _conv_bn("features.0", 3, STEM_CHANNELS, 3, 2, image_size)
    cin, index = STEM_CHANNELS, 1
    for expand, cout, count, first_stride in INVERTED_RESIDUAL_SETTING:
        for b in range(count):
            more, s = _inverted_residual(f"features.{index}", cin, cout, first_stride if b == 0 else 1, expand, s)
            layers += more
            cin, index = cout, index + 1
    more, s = _conv_bn(f"features.{index}", cin, LAST_CHANNELS, 1, 1, s)
    layers += more
    layers.append(linear("classifier.1", LAST_CHANNELS, num_classes))  # after global average pooling
    return Architecture(
        name="mobilenet-v2",
        layers=tuple(layers),
        description="MobileNet-v2, width 1.0 (torchvision.models.mobilenet_v2)",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )
