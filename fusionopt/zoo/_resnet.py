"""ResNet-18, -50, -101 and -152 in the layout of ``torchvision.models.resnet18``,
``resnet50``, ``resnet101`` and ``resnet152`` (ResNet v1.5).

ResNet-18 uses torchvision's ``BasicBlock`` (two 3x3 convolutions, no expansion; the
stride-2 on the first one); the deeper ones use ``Bottleneck`` blocks. v1.5 puts the stride-2 of a downsampling bottleneck on its 3x3 convolution (``conv2``),
not on the first 1x1. Convolutions have no bias; every convolution is followed by a
BatchNorm with a weight and a bias. FLOP convention: :mod:`fusionopt.zoo._layers`.
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

# Width (planes) and stride of the first block of layer1 .. layer4, shared by every
# bottleneck ResNet; the depths differ only in the number of blocks per stage.
STAGE_PLANES = (64, 128, 256, 512)
STAGE_STRIDES = (1, 2, 2, 2)
RESNET18_BLOCKS = (2, 2, 2, 2)  # basic blocks
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET101_BLOCKS = (3, 4, 23, 3)
RESNET152_BLOCKS = (3, 8, 36, 3)
EXPANSION = 4


def _conv_bn(conv: str, bn: str, cin: int, cout: int, kernel: int, stride: int, padding: int,
             size: int) -> tuple[list[Layer], int]:
    """A bias-free convolution and its BatchNorm; returns the layers and the output side."""
    out = out_size(size, kernel, stride, padding)
    return [conv2d(conv, cin, cout, kernel, out), batchnorm2d(bn, cout, out)], out


def _bottleneck(prefix: str, inplanes: int, planes: int, stride: int, size: int) -> tuple[list[Layer], int]:
    """One torchvision ``Bottleneck``: 1x1, 3x3 (strided), 1x1, optional downsample."""
    width, cout = planes, planes * EXPANSION
    layers, s = _conv_bn(f"{prefix}.conv1", f"{prefix}.bn1", inplanes, width, 1, 1, 0, size)
    more, s = _conv_bn(f"{prefix}.conv2", f"{prefix}.bn2", width, width, 3, stride, 1, s)
    layers += more
    more, s = _conv_bn(f"{prefix}.conv3", f"{prefix}.bn3", width, cout, 1, 1, 0, s)
    layers += more
    if stride != 1 or inplanes != cout:
        more, _ = _conv_bn(f"{prefix}.downsample.0", f"{prefix}.downsample.1", inplanes, cout, 1, stride, 0, size)
        layers += more
    return layers, s


def _basic_block(prefix: str, inplanes: int, planes: int, stride: int, size: int) -> tuple[list[Layer], int]:
    """One torchvision ``BasicBlock``: 3x3 (strided), 3x3, optional 1x1 downsample."""
    layers, s = _conv_bn(f"{prefix}.conv1", f"{prefix}.bn1", inplanes, planes, 3, stride, 1, size)
    more, s = _conv_bn(f"{prefix}.conv2", f"{prefix}.bn2", planes, planes, 3, 1, 1, s)
    layers += more
    if stride != 1 or inplanes != planes:
        more, _ = _conv_bn(f"{prefix}.downsample.0", f"{prefix}.downsample.1", inplanes, planes, 1, stride, 0, size)
        layers += more
    return layers, s


def _resnet(name: str, label: str, blocks: tuple[int, ...], image_size: int, num_classes: int,
            *, basic: bool = False) -> Architecture:
    """A torchvision ResNet with ``blocks`` blocks in layer1 .. layer4 (bottlenecks, or
    basic blocks when ``basic``)."""
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    layers, s = _conv_bn("conv1", "bn1", 3, 64, 7, 2, 3, image_size)
    s = out_size(s, 3, 2, 1)  # maxpool
    inplanes = 64
    block, expansion = (_basic_block, 1) if basic else (_bottleneck, EXPANSION)
    for stage, (planes, count, stride) in enumerate(zip(STAGE_PLANES, blocks, STAGE_STRIDES), start=1):
        for b in range(count):
            more, s = block(f"layer{stage}.{b}", inplanes, planes, stride if b == 0 else 1, s)
            layers += more
            inplanes = planes * expansion
    layers.append(linear("fc", inplanes, num_classes))  # after global average pooling
    return Architecture(
        name=name,
        layers=tuple(layers),
        description=f"{label} v1.5 (torchvision.models.{name})",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )


def resnet18(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """ResNet-18 (torchvision layout) for square RGB images: basic blocks 2, 2, 2, 2.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet).
    num_classes : int
        Outputs of the final ``fc`` layer (default 1000).

    Returns
    -------
    Architecture
        1 + 8 x 2 + 3 = 20 convolutions, 20 BatchNorms and ``fc``: 62 parameter tensors,
        11,689,512 parameters with 1000 classes; about 3.6 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = resnet18()
    >>> net.parameters, len(net.tensors)
    (11689512, 62)
    >>> net.tensors[3]
    ('layer1.0.conv1.weight', (64, 64, 3, 3))
    """
    return _resnet("resnet18", "ResNet-18", RESNET18_BLOCKS, image_size, num_classes, basic=True)


def resnet50(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """ResNet-50 (torchvision layout) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet).
    num_classes : int
        Outputs of the final ``fc`` layer (default 1000).

    Returns
    -------
    Architecture
        53 convolutions, 53 BatchNorms and ``fc``: 161 parameter tensors, 25,557,032
        parameters with 1000 classes; about 8.2 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = resnet50()
    >>> net.parameters, len(net.tensors)
    (25557032, 161)
    >>> net.tensors[0]
    ('conv1.weight', (64, 3, 7, 7))
    """
    return _resnet("resnet50", "ResNet-50", RESNET50_BLOCKS, image_size, num_classes)


def resnet101(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """ResNet-101 (torchvision layout) for square RGB images: bottleneck blocks 3, 4, 23, 3.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet).
    num_classes : int
        Outputs of the final ``fc`` layer (default 1000).

    Returns
    -------
    Architecture
        1 + 33 x 3 + 4 = 104 convolutions, 104 BatchNorms and ``fc``: 314 parameter
        tensors, 44,549,160 parameters with 1000 classes; about 15.6 GFLOPs per
        224 x 224 image.

    Examples
    --------
    >>> net = resnet101()
    >>> net.parameters, len(net.tensors)
    (44549160, 314)
    """
    return _resnet("resnet101", "ResNet-101", RESNET101_BLOCKS, image_size, num_classes)


def resnet152(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """ResNet-152 (torchvision layout) for square RGB images: bottleneck blocks 3, 8, 36, 3.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet).
    num_classes : int
        Outputs of the final ``fc`` layer (default 1000).

    Returns
    -------
    Architecture
        1 + 50 x 3 + 4 = 155 convolutions, 155 BatchNorms and ``fc``: 467 parameter
        tensors, 60,192,808 parameters with 1000 classes; about 23 GFLOPs per
        224 x 224 image.

    Examples
    --------
    >>> net = resnet152()
    >>> net.parameters, len(net.tensors)
    (60192808, 467)
    >>> net.tensors[-3]
    ('layer4.2.bn3.bias', (2048,))
    """
    return _resnet("resnet152", "ResNet-152", RESNET152_BLOCKS, image_size, num_classes)
